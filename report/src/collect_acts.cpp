// An activation file's prompts: which are shown, each one's rows, texts and tokens, its norm
// heatmaps (collect_norms.cpp), diffusion timeline (collect_timeline.cpp) and each generated
// token's score: log-probability from hook_logits, or commit confidence.
#include "acts_parts.h"
#include "collect.h"
#include "prompt_table.h"

#include <sonde/error.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace sonde::report {

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

namespace {

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
    p["norms"] = prompt_norms(f, hooks, start, rows, o, p["id"].get<std::string>(), notes);
    if (!diffusion && std::count(hooks.begin(), hooks.end(), "hook_logits") && count > 0) {
      p["scored"] = scored_by_logits(f, start, rows, tokens);
      p["score_kind"] = "log-probability";
    } else if (p.contains("timeline") && has_conf) {
      p["scored"] = scored_by_confidence(p["timeline"]);
      p["score_kind"] = "commit confidence";
    }
    out["prompts"].push_back(std::move(p));
  }
  return out;
}

}  // namespace sonde::report
