// Fuzz target: sonde serve's request parser (apps/sonde/serve/protocol*.cpp: a JSON body -> the
// run layer's requests, settings, capture and edits) on arbitrary bytes. The first byte picks the
// endpoint, the rest is the body. Every refusal must be an ApiError 400 with a message (never
// another exception: the server would answer 500); a request that parses must be within the
// limits the server relies on (token ids in the vocabulary, max_tokens under the cap, files under
// --files-dir).
#include "protocol.h"

#include <sonde/error.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "fuzz_hooks.h"
#include "fuzz_support.h"

namespace {

[[noreturn]] void broken(const char* what) { sonde::fuzz::broken("request", what); }

sonde::serve::ModelTraits traits(bool diffusion) {
  sonde::serve::ModelTraits m;
  m.diffusion = diffusion;
  m.tokenizer = true;
  m.chat_template = true;
  m.vocab_size = 2048;
  m.max_tokens_cap = 512;
  m.default_max_tokens = 16;
  m.files_dir = "/tmp/sonde-fuzz-request-files";
  return m;
}

void check(const sonde::serve::ParsedRequest& r, const sonde::serve::ModelTraits& m) {
  if (r.prompts.empty() || static_cast<std::int64_t>(r.prompts.size()) > m.max_prompts) broken("a prompt count out of range");
  for (const auto& p : r.prompts) {
    if (p.ids.empty() && p.text.empty() && p.messages.empty()) broken("an empty prompt");
    for (auto id : p.ids)
      if (id < 0 || id >= m.vocab_size) broken("a token id outside the vocabulary");
  }
  if (r.max_tokens < 0 || r.max_tokens > m.max_tokens_cap) broken("max_tokens outside [0, cap]");
  if (r.logprobs < -1 || r.logprobs > 20) broken("logprobs outside [-1, 20]");
  const std::string dir = m.files_dir.string() + "/";
  for (const auto& e : r.edits)
    if (!e.source.empty() && e.source != "inline" && e.source.rfind(dir, 0) != 0) broken("an edit's file outside --files-dir");
  if (!r.activations_file.empty() && r.activations_file.rfind(dir, 0) != 0) broken("activations_file outside --files-dir");
  for (const auto& iv : r.inline_vectors)
    if (iv.edit >= r.edits.size() || iv.values.empty()) broken("an inline vector without its edit");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  using sonde::serve::Endpoint;
  const Endpoint endpoint = data[0] % 3 == 0 ? Endpoint::Completions : data[0] % 3 == 1 ? Endpoint::Chat : Endpoint::Activations;
  const nlohmann::json body = nlohmann::json::parse(data + 1, data + size, nullptr, false);
  if (body.is_discarded()) return 0;  // the server refuses it before the parser sees it
  for (bool diffusion : {false, true}) {
    const auto m = traits(diffusion);
    try {
      check(sonde::serve::parse_request(endpoint, body, m), m);
    } catch (const sonde::serve::ApiError& e) {
      if (e.status != 400 || std::string(e.what()).empty()) broken("a refusal that is not a 400 with a message");
    } catch (const sonde::Error&) {
      broken("a sonde::Error escaped the parser (the server would answer 500)");
    } catch (const nlohmann::json::exception&) {
      broken("a JSON exception escaped the parser");
    }
  }
  return 0;
}

std::vector<std::string> sonde_fuzz_seeds() {
  return {
      std::string("\x00") + R"({"prompt":[1,2,3],"max_tokens":5,"temperature":0,"logprobs":2,"echo":true,"stop":["x"]})",
      std::string("\x00") + R"({"prompt":["hi",[4,5]],"seed":3,"top_p":0.9,"top_k":5,"hooks":"blocks.0.hook_resid_post","positions":"generated"})",
      std::string("\x00") + R"({"prompt":"x","steer":["h=v.npy*2",{"hook":"h","vector":[0.5,1],"scale":3}],"edits":[{"hook":"h","op":"scale","factor":2}]})",
      std::string("\x00") + R"({"prompt":[7],"steps":4,"alg":"entropy","diffusion_mode":"block","block_size":2,"stream":true,"stream_options":{"include_usage":true}})",
      std::string("\x01") + R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"logprobs":true,"top_logprobs":3})",
      std::string("\x02") + R"({"prompt":[1,2],"hooks":"blocks.*.hook_resid_post","logits":true,"edits":{"edits":[{"hook":"h","op":"add","vector":"../x.npy"}]}})",
  };
}
