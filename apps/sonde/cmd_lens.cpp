// sonde lens: the logit lens (core lens.h) of one sequence, as a compact table (each layer's most
// probable token at each position, its probability, * where it is the actual next token), as
// JSON lines (--json), or into an HDF5 file (--out) through the hdf5 sink.
#include "app_common.h"
#include "commands.h"

#include <sonde/error.h>
#include <sonde/lens.h>
#include <sonde/registry.h>
#include <sonde/request.h>
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
                  {"backend", s.backend_name()}, {"compute", s.compute()}, {"kind", "logit_lens"}};
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

// The lens at every denoising step: JSON lines with "step", a table per step, or --out with a
// leading step dimension (/lens/steps, /lens/top_ids [S, L, N, K], ...).
int diffusion_lens(Session& s, const std::vector<std::int32_t>& ids, std::int64_t top_k, const GenerationSettings& settings,
                   bool json, const std::string& out, bool overwrite) {
  if (!s.info().diffusion()) bad_input("--diffusion: model {} is not a diffusion model", s.info().arch);
  const DiffusionLens d = logit_lens_diffusion(s, ids, resolve_diffusion(settings, s.config(), s.info().diffusion_loop), top_k);
  if (!out.empty()) {
    if (std::filesystem::exists(out) && !overwrite) bad_input("--out: {} exists (use --overwrite to replace it)", out);
    const auto S = static_cast<std::int64_t>(d.per_step.size());
    const auto& f = d.per_step.front();
    const std::int64_t L = f.layers, N = f.tokens, K = f.top_k;
    Tensor steps(DType::i64, Shape{S}), top_ids(DType::i32, Shape{S, L, N, K}), top_probs(DType::f32, Shape{S, L, N, K});
    Tensor rank(DType::i64, Shape{S, L, N}), prob(DType::f32, Shape{S, L, N});
    for (std::int64_t st = 0; st < S; ++st) {
      steps.data<std::int64_t>()[st] = d.steps[static_cast<std::size_t>(st)];
      const auto& r = d.per_step[static_cast<std::size_t>(st)];
      for (std::int64_t i = 0; i < L * N; ++i) {
        const auto& c = r.cells[static_cast<std::size_t>(i)];
        for (std::int64_t k = 0; k < K; ++k) {
          top_ids.data<std::int32_t>()[(st * L * N + i) * K + k] = c.top_ids[static_cast<std::size_t>(k)];
          top_probs.data<float>()[(st * L * N + i) * K + k] = c.top_probs[static_cast<std::size_t>(k)];
        }
        rank.data<std::int64_t>()[st * L * N + i] = c.next_rank;
        prob.data<float>()[st * L * N + i] = c.next_prob;
      }
    }
    auto sink = PluginRegistry::instance().sink("hdf5");
    SinkOptions so;
    so.path = out;
    so.overwrite = overwrite;
    RunMetadata meta;
    meta.strings = {{"model_arch", s.info().arch}, {"config_json", s.config().raw_json}, {"backend", s.backend_name()},
                    {"compute", s.compute()}, {"kind", "logit_lens_diffusion"}};
    sink->open(so, meta, {});
    std::vector<std::int32_t> seq = d.sequence;
    sink->write_array("/sequence", TensorView(seq.data(), DType::i32, Shape{N}));
    sink->write_array("/lens/steps", steps.view());
    sink->write_array("/lens/top_ids", top_ids.view());
    sink->write_array("/lens/top_probs", top_probs.view());
    sink->write_array("/lens/next_rank", rank.view());
    sink->write_array("/lens/next_prob", prob.view());
    sink->close();
  }
  for (std::size_t st = 0; st < d.per_step.size(); ++st) {
    const auto& r = d.per_step[st];
    if (json) {
      for (std::int64_t l = 0; l < r.layers; ++l)
        for (std::int64_t t = 0; t < r.tokens; ++t) {
          const auto& c = r.at(l, t);
          nlohmann::json j{{"step", d.steps[st]}, {"layer", l}, {"pos", t}, {"top_ids", c.top_ids}, {"top_probs", c.top_probs}};
          if (c.next_id >= 0) j.update({{"next_id", c.next_id}, {"next_rank", c.next_rank}, {"next_prob", c.next_prob}});
          std::cout << j.dump() << "\n";
        }
    } else if (out.empty()) {
      std::cout << "step " << d.steps[st] << "\n";
      print_table(r, d.sequence, s.tokenizer());
    }
  }
  if (!out.empty() && !json) std::cout << "wrote " << out << " (" << d.per_step.size() << " steps)\n";
  return 0;
}

}  // namespace

int cmd_lens(const Args& args) {
  CommonOptions common;
  std::string ids_text, text, out;
  std::int64_t top_k = 5;
  bool json = false, overwrite = false, diffusion = false;
  po::options_description desc("lens options");
  add_common_options(desc, common);
  desc.add_options()
      ("ids", po::value(&ids_text), "token ids, e.g. 1,2,3")
      ("text", po::value(&text), "text to tokenize with the model's tokenizer")
      ("top-k", po::value(&top_k)->default_value(5), "tokens listed per layer and position")
      ("json", po::bool_switch(&json), "one JSON object per layer and position")
      ("out", po::value(&out), "HDF5 file: /lens/top_ids, top_probs [L,T,K], next_rank, next_prob [L,T], /logits")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing --out file")
      ("diffusion", po::bool_switch(&diffusion), "masked diffusion: generate from the prompt, the lens at every denoising step");
  GenerationSettings settings;  // --top-k is the lens's: diffusion here is greedy (temperature 0)
  std::int64_t max_new = 0, steps = 0;
  std::string alg;
  desc.add_options()
      ("max-new-tokens", po::value(&max_new), "with --diffusion: tokens to generate")
      ("steps", po::value(&steps), "with --diffusion: denoising steps")
      ("alg", po::value(&alg), "with --diffusion: origin, maskgit_plus, topk_margin, entropy");
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
  if (vm.count("max-new-tokens")) settings.max_new_tokens = max_new;
  if (vm.count("steps")) settings.steps = steps;
  if (vm.count("alg")) settings.alg = alg;
  if (!diffusion && (vm.count("max-new-tokens") || vm.count("steps") || vm.count("alg")))
    bad_input("--max-new-tokens, --steps and --alg need --diffusion");
  if (diffusion) return diffusion_lens(*session, ids, top_k, settings, json, out, overwrite);
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
