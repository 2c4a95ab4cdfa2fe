#pragma once
// Private: the SAX reader of tokenizer.json (see tokenizer_json_sax.cpp).
#include <nlohmann/json.hpp>

#include "tokenizer_internal.h"

namespace sonde::tok {

// Fills spec.vocab and spec.merges from model.vocab / model.merges and returns the rest as a DOM
// (those two fields absent). saw_* tell whether the fields were present.
nlohmann::json sax_read_tokenizer_json(std::string_view text, Spec& spec, bool& saw_vocab, bool& saw_merges);

}  // namespace sonde::tok
