// An activation file's prompts: the rows of each shown prompt, their norms per hook, the
// diffusion timeline from /steps, and each generated token's score (log-probability from
// hook_logits, or commit confidence from diffusion.hook_confidence).
#include "collect.h"
#include "prompt_table.h"

#include <sonde/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

namespace sonde::report {

namespace {

struct Rows {
  std::vector<std::int64_t> pos, step, kind, fresh, token;
  std::size_t size() const { return pos.size(); }
};

Rows read_rows(const H5File& f, std::int64_t start, std::int64_t count) {
  Rows r;
  r.pos = f.read_i64("/rows/pos", static_cast<hsize_t>(start), count);
  r.step = f.read_i64("/rows/step", static_cast<hsize_t>(start), count);
  r.kind = f.read_i64("/rows/kind", static_cast<hsize_t>(start), count);
  r.token = f.read_i64("/rows/token_id", static_cast<hsize_t>(start), count);
  r.fresh = f.has("/rows/fresh") ? f.read_i64("/rows/fresh", static_cast<hsize_t>(start), count)
                                  : std::vector<std::int64_t>(r.pos.size(), 1);
  return r;
}

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

std::optional<std::int64_t> mask_id(const nlohmann::json& attrs) {
  const auto cfg = nlohmann::json::parse(attrs.value("config_json", std::string("{}")), nullptr, false);
  if (cfg.is_object() && cfg.contains("mask_token_id") && cfg["mask_token_id"].is_number_integer())
    return cfg["mask_token_id"].get<std::int64_t>();
  return std::nullopt;
}

// The prompt's denoising steps (/steps entries of its prompt_idx): canvases after each step, each
// generated slot's commit step (the first step after which it is never the mask again), and the
// stale rows (fresh = 0) to mark.
nlohmann::json timeline(const H5File& f, const std::vector<std::int64_t>& step_prompt, std::int64_t prompt_idx,
                        std::optional<std::int64_t> mask, const Rows& rows, const std::vector<double>* confidence,
                        const ReportOptions& o, TokenTable& tokens, std::vector<std::string>& notes) {
  std::vector<std::size_t> entries;
  for (std::size_t j = 0; j < step_prompt.size(); ++j)
    if (step_prompt[j] == prompt_idx) entries.push_back(j);
  if (entries.empty() || !mask) return nullptr;
  const auto first = static_cast<hsize_t>(entries.front());
  const std::size_t n = entries.size();
  const auto step_no = f.read_i64("/steps/step", first, static_cast<hssize_t>(n));
  const auto n_transfer = f.read_i64("/steps/n_transfer", first, static_cast<hssize_t>(n));
  const auto off = f.read_i64("/steps/canvas_offsets", first, static_cast<hssize_t>(n + 1));
  const auto canvas = f.read_i64("/steps/canvas", static_cast<hsize_t>(off.front()), off.back() - off.front());
  auto slot = [&](std::size_t s, std::size_t p) { return canvas[static_cast<std::size_t>(off[s] - off.front()) + p]; };
  const auto width = static_cast<std::size_t>(off[1] - off[0]);
  // Slots masked before step 0: those committed by some step plus those still masked at the end.
  std::int64_t generated = 0;
  for (auto t : n_transfer) generated += t;
  for (std::size_t p = 0; p < width; ++p) generated += slot(n - 1, p) == *mask;
  const auto prompt_len = static_cast<std::int64_t>(width) - generated;
  nlohmann::json commit = nlohmann::json::array(), conf = nlohmann::json::array();
  std::map<std::int64_t, double> conf_at;  // pos -> confidence of the row committing it (kind 4)
  if (confidence)
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (rows.kind[r] == 4) conf_at[rows.pos[r]] = (*confidence)[r];
  for (std::size_t p = 0; p < width; ++p) {
    std::int64_t c = -1;
    if (static_cast<std::int64_t>(p) >= prompt_len) {
      for (std::size_t s = n; s-- > 0;) {
        if (slot(s, p) == *mask) break;
        c = step_no[s];
      }
    }
    commit.push_back(c);
    const auto it = conf_at.find(static_cast<std::int64_t>(p));
    conf.push_back(it != conf_at.end() && std::isfinite(it->second) ? nlohmann::json(it->second) : nlohmann::json(nullptr));
  }
  const auto kept = sample_evenly(n, static_cast<std::size_t>(o.max_steps));
  if (kept.size() < n) notes.push_back(fmt::format("prompt {}: timeline shows {} of {} steps, evenly spaced, the last kept", prompt_idx, kept.size(), n));
  nlohmann::json steps = nlohmann::json::array(), canvases = nlohmann::json::array(), transfer = nlohmann::json::array();
  for (auto s : kept) {
    std::vector<std::int64_t> ids(width);
    for (std::size_t p = 0; p < width; ++p) ids[p] = slot(s, p);
    tokens.use_all(ids);
    steps.push_back(step_no[s]);
    canvases.push_back(ids);
    transfer.push_back(n_transfer[s]);
  }
  tokens.use(*mask);
  nlohmann::json stale = nlohmann::json::array();
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (!rows.fresh[r]) stale.push_back({rows.step[r], rows.pos[r]});
  return {{"steps", steps}, {"canvas", canvases}, {"n_transfer", transfer}, {"mask_id", *mask}, {"prompt_len", prompt_len},
          {"commit_step", commit}, {"confidence", conf}, {"stale", stale}, {"total_steps", n}};
}

// Autoregressive: each generated token's log-probability under the logits of the row before it
// (hook_logits at p predict token p + 1), with the top 3 alternatives.
nlohmann::json scored_by_logits(const H5File& f, std::int64_t start, const Rows& rows, TokenTable& tokens) {
  const auto V = static_cast<std::size_t>(f.dims("/acts/hook_logits").back());
  std::map<std::int64_t, std::size_t> row_at;
  for (std::size_t r = 0; r < rows.size(); ++r) row_at[rows.pos[r]] = r;
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (rows.kind[r] != 1) continue;
    const auto prev = row_at.find(rows.pos[r] - 1);
    if (prev == row_at.end()) continue;
    const auto z = f.read_f64("/acts/hook_logits", static_cast<hsize_t>(start) + prev->second, 1);
    const double m = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double v : z) sum += std::exp(v - m);
    const double lse = m + std::log(sum);
    std::vector<std::size_t> order(V);
    for (std::size_t i = 0; i < V; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + std::min<std::size_t>(3, V), order.end(),
                      [&](std::size_t a, std::size_t b) { return z[a] > z[b]; });
    nlohmann::json alts = nlohmann::json::array();
    for (std::size_t k = 0; k < std::min<std::size_t>(3, V); ++k) {
      alts.push_back({order[k], std::exp(z[order[k]] - lse)});
      tokens.use(static_cast<std::int64_t>(order[k]));
    }
    const auto tok = rows.token[r];
    tokens.use(tok);
    out.push_back({{"pos", rows.pos[r]}, {"id", tok}, {"score", z[static_cast<std::size_t>(tok)] - lse}, {"alts", alts}});
  }
  return out;
}

}  // namespace

nlohmann::json collect_acts(H5File& f, const nlohmann::json& attrs, const ReportOptions& o, TokenTable& tokens,
                            std::vector<std::string>& notes) {
  const bool complete = attrs.value("complete", std::int64_t{0}) == 1 && f.attrs_readable();
  const std::int64_t mark = f.mark_prompts();
  const PromptTable P = PromptTable::read(f, complete ? -1 : mark);
  nlohmann::json out = {{"total", P.count}, {"partial", !complete}, {"prompts", nlohmann::json::array()}};
  if (!complete) notes.push_back(fmt::format("{}: not complete (being written, or its writer stopped): shown up to its last checkpoint, {} prompts", f.path(), P.count));

  std::vector<std::int64_t> chosen;
  if (!o.prompts.empty()) {
    const auto ids = P.all_ids();
    for (const auto& want : o.prompts) {
      const auto it = std::find(ids.begin(), ids.end(), want);
      if (it == ids.end()) bad_input("{}: --prompt '{}': no prompt with this id among its {} prompts", f.path(), want, P.count);
      chosen.push_back(it - ids.begin());
    }
  } else {
    for (std::int64_t e = 0; e < std::min(P.count, o.max_prompts); ++e) chosen.push_back(e);
    if (P.count > o.max_prompts)
      notes.push_back(fmt::format("showing the first {} of {} prompts (--prompt ID picks others)", chosen.size(), P.count));
  }

  const auto hooks = f.children("/acts");
  out["hooks"] = hooks;
  const auto step_prompt = f.has("/steps/prompt_idx") ? f.read_i64("/steps/prompt_idx") : std::vector<std::int64_t>{};
  const auto mask = mask_id(attrs);
  const bool diffusion = !step_prompt.empty();
  for (const auto e : chosen) {
    const auto tokens_all = P.tokens(e);
    tokens.use_all(tokens_all);
    nlohmann::json p = {{"entry", e}, {"prompt_idx", P.prompt_idx[static_cast<std::size_t>(e)]}, {"id", P.id(e)},
                        {"text", P.text("text", e)}, {"completion", P.text("completion", e)},
                        {"finish_reason", P.text("finish_reason", e)}, {"tokens", tokens_all}};
    const auto start = P.row_start[static_cast<std::size_t>(e)], count = P.row_count[static_cast<std::size_t>(e)];
    const Rows rows = count > 0 ? read_rows(f, start, count) : Rows{};
    std::vector<double> confidence;
    const bool has_conf = count > 0 && std::count(hooks.begin(), hooks.end(), "diffusion.hook_confidence");
    if (has_conf) confidence = f.read_f64("/acts/diffusion.hook_confidence", static_cast<hsize_t>(start), count);
    if (diffusion) {
      auto t = timeline(f, step_prompt, p["prompt_idx"], mask, rows, has_conf ? &confidence : nullptr, o, tokens, notes);
      if (!t.is_null()) p["timeline"] = std::move(t);
    }
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
    if (bin > 1) notes.push_back(fmt::format("prompt {}: {} positions averaged in bins of {}", p["id"].get<std::string>(), npos, bin));
    if (by_step && steps_kept.size() < steps.size())
      notes.push_back(fmt::format("prompt {}: norms at {} of {} steps", p["id"].get<std::string>(), steps_kept.size(), steps.size()));
    nlohmann::json groups = nlohmann::json::object();
    for (const auto& h : hooks) {
      if (h.rfind("diffusion.", 0) == 0 || count == 0) continue;  // scalar loop state, not activations
      add_norms(groups, h, row_norms(f, h, start, count), rows, steps_kept, bin, pos0, by_step);
    }
    nlohmann::json list = nlohmann::json::array();
    for (auto& [k, g] : groups.items()) list.push_back(std::move(g));
    p["norms"] = std::move(list);
    if (!diffusion && std::count(hooks.begin(), hooks.end(), "hook_logits") && count > 0) {
      p["scored"] = scored_by_logits(f, start, rows, tokens);
      p["score_kind"] = "log-probability";
    } else if (p.contains("timeline") && has_conf) {
      nlohmann::json s = nlohmann::json::array();
      const auto& t = p["timeline"];
      const auto& final_canvas = t["canvas"].back();  // the last step is always kept
      for (std::size_t q = 0; q < t["commit_step"].size(); ++q)
        if (t["commit_step"][q].get<std::int64_t>() >= 0 && !t["confidence"][q].is_null())
          s.push_back({{"pos", q}, {"id", final_canvas[q]}, {"score", t["confidence"][q]}, {"alts", nlohmann::json::array()}});
      p["scored"] = std::move(s);
      p["score_kind"] = "commit confidence";
    }
    out["prompts"].push_back(std::move(p));
  }
  return out;
}

}  // namespace sonde::report
