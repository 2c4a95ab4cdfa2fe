// Fuzz target: Tokenizer::encode on arbitrary bytes, with a synthetic Qwen2-style tokenizer (so
// the target needs no files). Invalid UTF-8 must be rejected with BadInput; valid text must
// round-trip (exactly for ASCII, up to NFC otherwise, checked as idempotence), and the
// streaming decoder must agree with decode. Anything else is a bug.
#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_hooks.h"

namespace {

const sonde::Tokenizer& tokenizer() {
  static const sonde::Tokenizer t = sonde::Tokenizer::from_json(
      sonde::make_synthetic_tokenizer_json(1024, {{"<|endoftext|>", 1021}, {"<|im_start|>", 1022}, {"<|im_end|>", 1023}}, 3),
      "synthetic");
  return t;
}

[[noreturn]] void broken(const char* what, const std::string& input) {
  std::fprintf(stderr, "tokenizer invariant broken: %s (input of %zu bytes)\n", what, input.size());
  std::abort();
}

bool ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

void check_valid(const std::string& text) {
  const auto& t = tokenizer();
  const auto ids = t.encode(text);
  const std::string back = t.decode(ids);
  if (ascii(text) && back != text) broken("ASCII text does not round-trip", text);
  if (t.decode(t.encode(back)) != back) broken("decode(encode(.)) is not idempotent", text);
  sonde::StreamDecoder stream(t);
  std::string streamed;
  for (auto id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (streamed != back) broken("streaming decode differs from decode", text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  try {
    check_valid(input);
  } catch (const sonde::Error& e) {
    if (e.kind() != sonde::ErrorKind::BadInput) broken("runtime error from encode", input);
    // Only invalid UTF-8 may be refused, and its repaired form must then be accepted.
    const std::string repaired = sonde::utf8_replace_invalid(input);
    if (repaired == input) broken("valid UTF-8 was refused", input);
    check_valid(repaired);
  }
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {"Hello world! It's 2024.\r\n\tdef f(x):\n    return x  ",
          "<|im_start|>user\nhi<|im_end|><|im_start|",
          "数据科学 한국어 café e\xCC\x81 \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE2\x85\xAB\xC2\xB2",
          std::string("\x00\xFF\xC0\xAF\xED\xA0\x80 ok", 10),
          std::string(3000, ' ') + std::string(2000, 'a')};
}
