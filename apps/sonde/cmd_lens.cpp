// sonde lens: the logit lens (core lens.h) of one sequence, as a compact table (each layer's most
// probable token at each position, its probability, * where it is the actual next token), as
// JSON lines (--json), or into an HDF5 file (--out): a Lens run of the run layer (run.h).
#include "app_common.h"
#include "commands.h"
#include "run_flags.h"

#include <sonde/error.h>
#include <sonde/lens.h>
#include <sonde/run.h>
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

// One JSON object per layer and position ("step" first for a diffusion step).
void print_json(const LensResult& r, const std::int64_t* step) {
  for (std::int64_t l = 0; l < r.layers; ++l)
    for (std::int64_t t = 0; t < r.tokens; ++t) {
      const auto& c = r.at(l, t);
      nlohmann::json j;
      if (step) j["step"] = *step;
      j.update({{"layer", l}, {"pos", t}, {"top_ids", c.top_ids}, {"top_probs", c.top_probs}});
      if (c.next_id >= 0) j.update({{"next_id", c.next_id}, {"next_rank", c.next_rank}, {"next_prob", c.next_prob}});
      std::cout << j.dump() << "\n";
    }
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
  // --top-k is the lens's: diffusion here is greedy (temperature 0)
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
  Request request;
  request.where = vm.count("ids") ? "--ids" : "--text";
  if (vm.count("ids")) request.ids = parse_id_list(ids_text, "--ids");
  else request.text = text;
  if (vm.count("max-new-tokens")) request.settings.max_new_tokens = max_new;
  if (vm.count("steps")) request.settings.steps = steps;
  if (vm.count("alg")) request.settings.alg = alg;
  if (!diffusion && (vm.count("max-new-tokens") || vm.count("steps") || vm.count("alg")))
    bad_input("--max-new-tokens, --steps and --alg need --diffusion");
  RunOptions o;
  o.kind = RunKind::Lens;
  o.command = "lens";
  o.lens = LensSettings{top_k, diffusion};
  o.overwrite = overwrite;
  if (!out.empty()) o.sinks = {SinkSpec{"hdf5", out, overwrite, nullptr}};
  const auto flags = {std::pair{"hdf5", "--out"}, std::pair{"top_k", "--top-k"}, std::pair{"diffusion", "--diffusion"}};
  as_flags(flags, [&] { check_outputs(o); });
  auto session = open_session(common);
  RunResult res;
  as_flags(flags, [&] { res = run(*session, {request}, o); });
  const Tokenizer* tok = session->tokenizer();
  if (res.lens_steps) {
    const auto& d = *res.lens_steps;
    for (std::size_t st = 0; st < d.per_step.size(); ++st) {
      if (json) {
        print_json(d.per_step[st], &d.steps[st]);
      } else if (out.empty()) {
        std::cout << "step " << d.steps[st] << "\n";
        print_table(d.per_step[st], d.sequence, tok);
      }
    }
    if (!out.empty() && !json) std::cout << "wrote " << out << " (" << d.per_step.size() << " steps)\n";
    return 0;
  }
  const LensResult& r = *res.lens;
  if (json) {
    print_json(r, nullptr);
  } else if (out.empty()) {
    print_table(r, res.results.empty() ? std::vector<std::int32_t>{} : res.results.front().prompt_ids, tok);
  } else {
    std::cout << "wrote " << out << " (" << r.layers << " layers x " << r.tokens << " positions, top " << r.top_k << ")\n";
  }
  return 0;
}

}  // namespace sonde::cli
