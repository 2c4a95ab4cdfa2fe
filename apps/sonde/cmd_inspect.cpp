// sonde inspect: architecture, parameter count, dtypes, a memory estimate and the tokenizer.
#include "app_common.h"
#include "commands.h"

#include <sonde/tokenizer.h>

#include <iostream>
#include <map>

namespace sonde::cli {

namespace {
std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }
}  // namespace

int cmd_inspect(const Args& args) {
  CommonOptions common;
  po::options_description desc("inspect options");
  add_common_options(desc, common);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde inspect --model DIR", desc, vm)) return 0;
  if (common.backend.empty()) common.backend = "reference";  // zero-copy: inspecting needs no compute
  auto session = open_session(common);
  const ModelConfig& c = session->config();
  const ModelInfo info = session->info();

  std::int64_t params = 0;
  std::map<std::string, std::int64_t> by_dtype;
  session->weights().visit([&](const WeightInfo& w) {
    params += w.shape.numel();
    by_dtype[std::string(dtype_name(w.dtype))] += w.shape.numel();
  });
  std::cout << "model        " << session->model_dir().string() << "\n"
            << "architecture " << info.arch << " (model_type " << c.model_type << ", "
            << decoding_name(info.decoding) << ", "
            << (info.causal ? "causal" : "bidirectional") << " attention)\n"
            << "layers " << c.num_hidden_layers << ", hidden " << c.hidden_size << ", heads " << c.num_attention_heads
            << " (kv " << c.num_key_value_heads << ", dim " << c.head_dim << "), intermediate " << c.intermediate_size
            << ", vocab " << c.vocab_size << ", tied embeddings " << (c.tie_word_embeddings ? "yes" : "no") << "\n"
            << "parameters   " << params << " in " << session->weights().size() << " tensors;";
  for (const auto& [d, n] : by_dtype) std::cout << " " << d << ": " << n;
  std::cout << "\nfile bytes   " << session->weights().total_bytes() << " (" << gib(static_cast<double>(session->weights().total_bytes()))
            << ", mapped, not copied)\n"
            << "memory       threaded and reference read the weights in place (about the file size); "
            << "threaded --weights q8 adds about " << gib(static_cast<double>(params) * 34.0 / 32.0)
            << " of int8 blocks; cpu-blas widens them to f32: " << gib(static_cast<double>(params) * 4)
            << "; plus activations\n";
  if (const Tokenizer* tok = session->tokenizer()) {
    std::cout << "tokenizer    " << tok->vocab_size() << " tokens\n";
  } else {
    std::cout << "tokenizer    none (run from token ids with --ids)\n";
  }
  if (info.prediction_shift) std::cout << "note         logits at slot p predict token p+" << info.prediction_shift << "\n";
  return 0;
}

}  // namespace sonde::cli
