// sonde lens: the logit lens (core lens.h) of one sequence, as a compact table (each layer's most
// probable token at each position, its probability, * where it is the actual next token), as
// JSON lines (--json), or into an HDF5 file (--out) through the hdf5 sink.
#include "app_common.h"
#include "commands.h"

#include <sonde/error.h>
#include <sonde/lens.h>
#include <sonde/registry.h>
#include <sonde/sink.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

namespace sonde::cli {

namespace {

// A token as a short printable cell: its text with control characters escaped, at most `w` wide.
std::string shown(const Tokenizer* tok, std::int32_t id, std::size_t w) {
  std::string s = tok ? tok->decode(std::vector<std::int32_t>{id}) : std::to_string(id);
  std::string out;
  for (unsigned char c : s) out += c < 0x20 || c == 0x7f ? std::string("?") : std::string(1, static_cast<char>(c));
  if (out.size() > w) out = out.substr(0, w);
  return out;
}

void print_table(const LensResult& r, const std::vector<std::int32_t>& ids, const Tokenizer* tok) {
  constexpr std::size_t w = 10;
  std::cout << fmt::format("{:>8}", "layer");
  for (std::int64_t t = 0; t < r.tokens; ++t) std::cout << fmt::format(" {:>{}}", shown(tok, ids[static_cast<std::size_t>(t)], w), w + 5);
  std::cout << "\n";
  for (std::int64_t l = 0; l < r.layers; ++l) {
    std::cout << fmt::format("{:>8}", l);
    for (std::int64_t t = 0; t < r.tokens; ++t) {
      const auto& c = r.at(l, t);
      const std::string cell = fmt::format("{}{} {:2.0f}%", c.next_rank == 0 ? "*" : "", shown(tok, c.top_ids[0], w), 100 * c.top_probs[0]);
      std::cout << fmt::format(" {:>{}}", cell, w + 5);
    }
    std::cout << "\n";
  }
  std::cout << "each cell: the layer's most probable next token and its probability; * = the actual next token\n";
}

void write_h5(const std::string& path, bool overwrite, const LensResult& r, const std::vector<std::int32_t>& ids,
              const Session& s) {
  if (std::filesystem::exists(path) && !overwrite) bad_input("--out: {} exists (use --overwrite to replace it)", path);
  const std::int64_t L = r.layers, T = r.tokens, K = r.top_k;
  Tensor top_ids(DType::i32, Shape{L, T, K}), top_probs(DType::f32, Shape{L, T, K});
  Tensor rank(DType::i64, Shape{L, T}), prob(DType::f32, Shape{L, T});
  for (std::int64_t i = 0; i < L * T; ++i) {
    const auto& c = r.cells[static_cast<std::size_t>(i)];
    for (std::int64_t k = 0; k < K; ++k) {
      top_ids.data<std::int32_t>()[i * K + k] = c.top_ids[static_cast<std::size_t>(k)];
      top_probs.data<float>()[i * K + k] = c.top_probs[static_cast<std::size_t>(k)];
    }
    rank.data<std::int64_t>()[i] = c.next_rank;
    prob.data<float>()[i] = c.next_prob;
  }
  auto sink = PluginRegistry::instance().sink("hdf5");
  SinkOptions so;
  so.path = path;
  so.overwrite = overwrite;
  RunMetadata meta;
  meta.strings = {{"model_arch", s.info().arch}, {"model_path", s.model_dir().string()}, {"config_json", s.config().raw_json},
                  {"backend", s.backend_name()}, {"kind", "logit_lens"}};
  sink->open(so, meta, {});
  sink->write_array("/input_ids", TensorView(const_cast<std::int32_t*>(ids.data()), DType::i32, Shape{T}));
  sink->write_array("/lens/top_ids", top_ids.view());
  sink->write_array("/lens/top_probs", top_probs.view());
  sink->write_array("/lens/next_rank", rank.view());
  sink->write_array("/lens/next_prob", prob.view());
  sink->write_array("/logits", r.logits.view());
  sink->write_array("/lens/last_layer_logits", r.last_logits.view());
  sink->close();
}

}  // namespace

int cmd_lens(const Args& args) {
  CommonOptions common;
  std::string ids_text, text, out;
  std::int64_t top_k = 5;
  bool json = false, overwrite = false;
  po::options_description desc("lens options");
  add_common_options(desc, common);
  desc.add_options()
      ("ids", po::value(&ids_text), "token ids, e.g. 1,2,3")
      ("text", po::value(&text), "text to tokenize with the model's tokenizer")
      ("top-k", po::value(&top_k)->default_value(5), "tokens listed per layer and position")
      ("json", po::bool_switch(&json), "one JSON object per layer and position")
      ("out", po::value(&out), "HDF5 file: /lens/top_ids, top_probs [L,T,K], next_rank, next_prob [L,T], /logits")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing --out file");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde lens --model DIR (--ids 1,2,3 | --text T) [--top-k K] [--json] [--out F.h5]", desc, vm))
    return 0;
  if (vm.count("ids") == vm.count("text")) bad_input("give exactly one of --ids and --text");
  if (top_k < 1) bad_input("--top-k must be at least 1, got {}", top_k);
  auto session = open_session(common);
  const Tokenizer* tok = session->tokenizer();
  std::vector<std::int32_t> ids;
  if (vm.count("ids")) {
    ids = parse_id_list(ids_text, "--ids");
  } else {
    if (!tok) bad_input("--text: {} has no tokenizer; give --ids", session->model_dir().string());
    ids = tok->encode(text);
  }
  if (ids.empty()) bad_input("no tokens to run");
  session->check_ids(ids);
  const LensResult r = logit_lens(*session, ids, top_k);
  if (!out.empty()) write_h5(out, overwrite, r, ids, *session);
  if (json) {
    for (std::int64_t l = 0; l < r.layers; ++l)
      for (std::int64_t t = 0; t < r.tokens; ++t) {
        const auto& c = r.at(l, t);
        nlohmann::json j{{"layer", l}, {"pos", t}, {"top_ids", c.top_ids}, {"top_probs", c.top_probs}};
        if (c.next_id >= 0) j.update({{"next_id", c.next_id}, {"next_rank", c.next_rank}, {"next_prob", c.next_prob}});
        std::cout << j.dump() << "\n";
      }
  } else if (out.empty()) {
    print_table(r, ids, tok);
  } else {
    std::cout << "wrote " << out << " (" << r.layers << " layers x " << r.tokens << " positions, top " << r.top_k << ")\n";
  }
  return 0;
}

}  // namespace sonde::cli
