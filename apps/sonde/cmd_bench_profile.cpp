// sonde bench --profile and --hooks (cmd_bench_profile.h).
#include "cmd_bench_profile.h"

#include <sonde/error.h>
#include <sonde/sae.h>

#include <fmt/core.h>

#include <algorithm>
#include <iostream>
#include <sstream>
#include <vector>

namespace sonde::cli {

std::set<std::string> bench_hooks(const Session& s, const std::string& list) {
  std::set<std::string> known, hooks;
  for (const auto& h : s.hook_points()) known.insert(h.name);
  std::stringstream in(list);
  for (std::string h; std::getline(in, h, ',');) {
    if (h.empty()) continue;
    if (!known.count(h)) bad_input("--hooks: '{}' is not a hook point of {} (sonde hooks lists them)", h, s.model_dir().string());
    hooks.insert(h);
  }
  return hooks;
}

Executor::Tap bench_tap() {
  return [](const std::string& hook, const TensorView& v) {
    if (!sae_acts_post_hook(hook) || v.dtype != DType::f32 || !v.contiguous() || v.shape.rank < 1) return;
    const std::int64_t cols = v.shape[v.shape.rank - 1], rows = v.shape.numel() / std::max<std::int64_t>(cols, 1);
    std::vector<std::int32_t> idx, indices;
    std::vector<float> values;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = v.as<const float>() + r * cols;
      sparse_row_entries(row, cols, 0, idx);
      for (auto j : idx) values.push_back(row[j]);
      indices.insert(indices.end(), idx.begin(), idx.end());
    }
  };
}

nlohmann::ordered_json profile_json(const ExecProfile& p) {
  nlohmann::ordered_json j{{"runs", p.runs()}};
  double total = 0;
  auto nodes = nlohmann::ordered_json::array();
  for (const auto& n : p.nodes()) {
    total += n.seconds + n.tap_seconds;
    nodes.push_back({{"name", n.name}, {"op", std::string(op_name(n.op))}, {"shape", n.shape.str()}, {"runs", n.runs},
                     {"seconds", n.seconds}, {"best_seconds", n.best_seconds}, {"taps", n.taps}, {"tap_seconds", n.tap_seconds}, {"flops", n.flops}, {"sibling", n.sibling}});
  }
  j["node_seconds"] = total;
  auto kinds = nlohmann::ordered_json::array();
  for (const auto& k : p.by_kind()) kinds.push_back({{"op", k.op}, {"seconds", k.seconds}, {"nodes", k.runs}});
  j["by_kind"] = kinds;
  j["nodes"] = nodes;
  return j;
}

void print_profile(const nlohmann::ordered_json& profile, int top) {
  const auto runs = std::max<std::int64_t>(profile["runs"].get<std::int64_t>(), 1);
  const double total = profile["node_seconds"].get<double>();
  const auto ms = [runs](double s) { return 1e3 * s / static_cast<double>(runs); };
  std::cout << fmt::format("  profile over {} runs: {:.3f} ms a run in graph nodes (taps included)\n", runs, ms(total));
  std::cout << "  per op kind, ms a run (share):\n";
  for (const auto& k : profile["by_kind"])
    std::cout << fmt::format("    {:<16} {:>10.3f}  ({:4.1f}%)  {} nodes a run\n", k["op"].get<std::string>(),
                             ms(k["seconds"].get<double>()), total > 0 ? 100 * k["seconds"].get<double>() / total : 0.0,
                             k["nodes"].get<std::int64_t>() / runs);
  std::vector<nlohmann::ordered_json> nodes(profile["nodes"].begin(), profile["nodes"].end());
  const auto cost = [](const nlohmann::ordered_json& n) { return n["seconds"].get<double>() + n["tap_seconds"].get<double>(); };
  std::stable_sort(nodes.begin(), nodes.end(), [&](const auto& a, const auto& b) { return cost(a) > cost(b); });
  std::cout << fmt::format("  top {} nodes, ms a run (op + tap):\n", std::min<std::size_t>(nodes.size(), static_cast<std::size_t>(top)));
  for (std::size_t i = 0; i < nodes.size() && i < static_cast<std::size_t>(top); ++i) {
    const auto& n = nodes[i];
    const double s = n["seconds"].get<double>(), flops = n["flops"].get<double>();
    std::cout << fmt::format("    {:>9.3f} + {:.3f}  {:<13} {:<16} {}{}{}\n", ms(s), ms(n["tap_seconds"].get<double>()),
                             n["op"].get<std::string>(), n["shape"].get<std::string>(), n["name"].get<std::string>(),
                             flops > 0 && s > 0 ? fmt::format(" ({:.1f} GFLOP/s)", flops / s / 1e9) : "",
                             n["sibling"].get<bool>() ? " (sibling share)" : "");
  }
}

}  // namespace sonde::cli
