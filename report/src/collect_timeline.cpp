// The diffusion timeline of one prompt: its canvases after each step (/steps), each generated
// slot's commit step and confidence, and the rows a cached mode reused (fresh = 0).
#include "acts_parts.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

namespace sonde::report {

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

nlohmann::json scored_by_confidence(const nlohmann::json& t) {
  nlohmann::json s = nlohmann::json::array();
  const auto& final_canvas = t["canvas"].back();  // the last step is always kept
  for (std::size_t q = 0; q < t["commit_step"].size(); ++q)
    if (t["commit_step"][q].get<std::int64_t>() >= 0 && !t["confidence"][q].is_null())
      s.push_back({{"pos", q}, {"id", final_canvas[q]}, {"score", t["confidence"][q]}, {"alts", nlohmann::json::array()}});
  return s;
}

}  // namespace sonde::report
