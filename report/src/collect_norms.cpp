// Row norms per hook for one prompt: the L2 norm of every row, grouped by hook kind, layer by
// position (and by step when a position has several rows), binned and sampled to the budget.
#include "acts_parts.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace sonde::report {

namespace {

// "blocks.3.hook_resid_post" -> ("blocks.*.hook_resid_post", "3"); any other hook is its own group.
std::pair<std::string, std::string> hook_group(const std::string& hook) {
  static const std::regex block(R"(^blocks\.(\d+)\.(.+)$)");
  std::smatch m;
  if (std::regex_match(hook, m, block)) return {"blocks.*." + m[2].str(), m[1].str()};
  return {hook, "-"};
}

// Per-row L2 norms of `hook`'s rows [start, start + count).
std::vector<double> row_norms(const H5File& f, const std::string& hook, std::int64_t start, std::int64_t count) {
  const std::string ds = "/acts/" + hook;
  const auto v = f.read_f64(ds, static_cast<hsize_t>(start), count);
  const std::size_t per = count > 0 ? v.size() / static_cast<std::size_t>(count) : 0;
  std::vector<double> out(static_cast<std::size_t>(count));
  for (std::size_t r = 0; r < out.size(); ++r) {
    double s = 0;
    for (std::size_t i = 0; i < per; ++i) s += v[r * per + i] * v[r * per + i];
    out[r] = std::sqrt(s);
  }
  return out;
}

// The heatmap cells of one hook group for one prompt: columns (layer, pos, step, norm, fresh),
// positions binned and steps sampled to the budget.
struct Cell {
  double sum = 0;
  std::int64_t n = 0, fresh = 1;
};

void add_norms(nlohmann::json& groups, const std::string& hook, const std::vector<double>& norms, const Rows& rows,
               const std::set<std::int64_t>& steps_kept, std::int64_t bin, std::int64_t pos0, bool by_step) {
  const auto [group, layer] = hook_group(hook);
  auto& g = groups[group];
  if (g.is_null()) g = {{"hook", group}, {"layers", nlohmann::json::array()}, {"by_step", by_step}, {"bin", bin},
                        {"cells", {{"layer", nlohmann::json::array()}, {"pos", nlohmann::json::array()},
                                   {"step", nlohmann::json::array()}, {"norm", nlohmann::json::array()},
                                   {"fresh", nlohmann::json::array()}}}};
  g["layers"].push_back(layer);
  std::map<std::pair<std::int64_t, std::int64_t>, Cell> cells;  // (step, binned pos)
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t step = by_step ? rows.step[r] : 0;
    if (by_step && !steps_kept.count(step)) continue;
    auto& c = cells[{step, pos0 + (rows.pos[r] - pos0) / bin * bin}];
    c.sum += norms[r];
    c.n += 1;
    c.fresh = std::min(c.fresh, rows.fresh[r]);
  }
  auto& out = g["cells"];
  for (const auto& [key, c] : cells) {
    out["layer"].push_back(layer);
    out["pos"].push_back(key.second);
    out["step"].push_back(key.first);
    out["norm"].push_back(c.sum / static_cast<double>(c.n));
    out["fresh"].push_back(c.fresh);
  }
}

// The most hooks of one group (blocks.*.X): the heatmap with the most rows.
std::int64_t largest_group(const std::vector<std::string>& hooks) {
  std::map<std::string, std::int64_t> n;
  std::int64_t most = 0;
  for (const auto& h : hooks)
    if (h.rfind("diffusion.", 0) != 0) most = std::max(most, ++n[hook_group(h).first]);
  return most;
}

}  // namespace

nlohmann::json prompt_norms(const H5File& f, const std::vector<std::string>& hooks, std::int64_t start, const Rows& rows,
                            const ReportOptions& o, const std::string& prompt_id, std::vector<std::string>& notes) {
  const auto count = static_cast<std::int64_t>(rows.size());
  // Norms: a step axis when a position has several rows (diffusion capture all / every:K).
  std::set<std::int64_t> positions(rows.pos.begin(), rows.pos.end()), steps(rows.step.begin(), rows.step.end());
  const bool by_step = positions.size() < rows.size();
  // The budget: at most max_positions columns (consecutive positions averaged), then as many
  // steps as keep the largest hook group's heatmap within max_cells (at most max_steps), and
  // wider bins if even one step's layers x columns would not fit.
  const std::int64_t pos0 = positions.empty() ? 0 : *positions.begin();
  const auto npos = static_cast<std::int64_t>(positions.size());
  const std::int64_t layers = std::max<std::int64_t>(1, largest_group(hooks));
  const auto ceil_div = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t bin = std::max<std::int64_t>({1, ceil_div(npos, o.max_positions), ceil_div(npos * layers, o.max_cells)});
  const std::int64_t step_budget = std::clamp<std::int64_t>(o.max_cells / (layers * ceil_div(std::max<std::int64_t>(npos, 1), bin)), 1, o.max_steps);
  std::set<std::int64_t> steps_kept;
  const std::vector<std::int64_t> step_list(steps.begin(), steps.end());
  for (auto i : sample_evenly(step_list.size(), static_cast<std::size_t>(step_budget))) steps_kept.insert(step_list[i]);
  if (bin > 1) notes.push_back(fmt::format("prompt {}: {} positions averaged in bins of {}", prompt_id, npos, bin));
  if (by_step && steps_kept.size() < steps.size())
    notes.push_back(fmt::format("prompt {}: norms at {} of {} steps", prompt_id, steps_kept.size(), steps.size()));
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& h : hooks) {
    if (h.rfind("diffusion.", 0) == 0 || count == 0) continue;  // scalar loop state, not activations
    add_norms(groups, h, row_norms(f, h, start, count), rows, steps_kept, bin, pos0, by_step);
  }
  nlohmann::json list = nlohmann::json::array();
  for (auto& [k, g] : groups.items()) list.push_back(std::move(g));
  return list;
}

}  // namespace sonde::report
