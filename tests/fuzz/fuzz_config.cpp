// Fuzz target: config.json and generation_config.json readers (ModelConfig::parse,
// parse_generation_config) on arbitrary bytes. Bad input must be a BadInput error; a config that
// parses must have the invariants the engine relies on (positive sizes, head dim times heads).
#include <sonde/config.h>
#include <sonde/error.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_hooks.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void broken(const char* what) { sonde::fuzz::broken("config", what); }

template <typename F>
void expect_ok_or_bad_input(F&& f) {
  try {
    f();
  } catch (const sonde::Error& e) {
    if (e.kind() != sonde::ErrorKind::BadInput) broken("a runtime error, not bad input");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  expect_ok_or_bad_input([&] {
    const auto c = sonde::ModelConfig::parse(input, "fuzz/config.json");
    if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 ||
        c.vocab_size <= 0 || c.head_dim <= 0)
      broken("a parsed config with a non-positive size");
    if (c.num_attention_heads % c.num_key_value_heads != 0) broken("query heads not a multiple of KV heads");
  });
  expect_ok_or_bad_input([&] { sonde::parse_generation_config(input, "fuzz/generation_config.json"); });
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {R"({"architectures":["Qwen2ForCausalLM"],"model_type":"qwen2","hidden_size":64,"intermediate_size":128,
"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":2048,"rms_norm_eps":1e-06,
"rope_theta":1000000.0,"tie_word_embeddings":true,"bos_token_id":2047,"eos_token_id":2047,"max_position_embeddings":32768})",
          R"({"architectures":["DreamModel"],"model_type":"Dream","hidden_size":64,"intermediate_size":128,
"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":2048,"rms_norm_eps":1e-06,
"rope_theta":1000000.0,"tie_word_embeddings":false,"mask_token_id":2047,"pad_token_id":2046,"eos_token_id":[2046]})",
          R"({"do_sample":true,"temperature":0.7,"top_p":0.8,"top_k":20,"eos_token_id":[151645,151643]})",
          R"({"alg":"entropy","steps":512,"eps":0.001,"alg_temp":null,"mask_token_id":null,"temperature":0.0})"};
}
