// sonde hooks: every hook point of a model with the shape of its rows ([tokens, ...]).
#include "app_common.h"
#include "commands.h"
#include "run_flags.h"

#include <nlohmann/json.hpp>

#include <iostream>

namespace sonde::cli {

int cmd_hooks(const Args& args) {
  CommonOptions common;
  bool json = false;
  po::options_description desc("hooks options");
  add_common_options(desc, common);
  desc.add_options()("json", po::bool_switch(&json), "print a JSON array of {name, shape}");
  SaeFlags sae;
  add_sae_options(desc, sae);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde hooks --model DIR [--json]", desc, vm)) return 0;
  if (common.backend.empty()) common.backend = "reference";  // zero-copy: listing needs no compute
  auto session = open_session(common);
  attach_saes(*session, sae);  // their hook_sae_* points are listed after their hooks
  const auto hooks = session->hook_points();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& h : hooks) {
      std::vector<std::string> shape{"T"};
      for (auto d : h.row_shape) shape.push_back(d == kKeysDim ? "T" : std::to_string(d));
      out.push_back({{"name", h.name}, {"row_shape", h.row_shape}, {"shape", shape}});
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  std::size_t width = 0;
  for (const auto& h : hooks) width = std::max(width, h.name.size());
  for (const auto& h : hooks) {
    std::string shape = "[T";
    for (auto d : h.row_shape) shape += ", " + (d == kKeysDim ? std::string("T") : std::to_string(d));
    std::cout << h.name << std::string(width + 2 - h.name.size(), ' ') << shape << "]\n";
  }
  std::cout << "\n" << hooks.size() << " hook points; T is the number of tokens. Aliases: model.layers.{i} "
            << "(= blocks.{i}.hook_resid_post), hidden_states.{k}, llama.cpp tags (l_out-{i}, ...).\n"
            << "attn.hook_pattern rows hold one probability per key; they are computed on the reference path, "
            << "only by `sonde forward`, and only when named (globs skip them unless they say hook_pattern).\n";
  return 0;
}

}  // namespace sonde::cli
