// RunKind::Score (run.h): each request's completion scored given its prompt (score.h), one result
// line per request; with hooks (autoregressive), each request's rows over prompt + completion into
// the sinks, marked prompt then generated.
#include <sonde/error.h>
#include <sonde/score.h>

#include "run_internal.h"

#include <filesystem>
#include <fstream>

namespace sonde::run_detail {
namespace {

// The request's rows: the prompt's slots (kind prompt, step -1), then the completion's (generated).
void end_prompt(Sink& sink, const PreparedRequest& p) {
  std::vector<RowRecord> rows;
  std::vector<std::int32_t> all = p.ids;
  all.insert(all.end(), p.completion.begin(), p.completion.end());
  for (std::size_t t = 0; t < all.size(); ++t)
    rows.push_back({p.index, static_cast<std::int32_t>(t), all[t], -1, t < p.ids.size() ? RowKind::Prompt : RowKind::Generated});
  sink.add_rows(rows);
  PromptRecord rec;
  rec.prompt_idx = p.index;
  rec.id = p.id;
  rec.finish_reason = "score";
  rec.token_ids = all;
  sink.end_prompt(rec);
}

nlohmann::json score_ar(Session& session, const PreparedRequest& p, const CaptureSpec& spec, Outputs& out) {
  std::set<std::string> taps;
  for (const auto& h : spec.hooks) taps.insert(h.name);
  auto& sinks = out.sinks();
  const ArScore s = score_autoregressive(session, p.ids, p.completion, taps, [&](const std::string& hook, const TensorView& v) {
    Shape rows = v.shape;  // [1, T, ...] -> [T, ...]
    for (int k = 1; k < rows.rank; ++k) rows[k - 1] = rows[k];
    rows.rank -= 1;
    for (auto& sink : sinks)
      if (sink->wants(hook)) sink->write(TapRecord{hook, p.index}, v.reshaped(rows));
  });
  for (auto& sink : sinks) end_prompt(*sink, p);
  return {{"token_logprobs", s.token_logprobs}, {"logprob", s.logprob}, {"mean_logprob", s.mean_logprob},
          {"perplexity", s.perplexity}};
}

nlohmann::json score_masked(Session& session, const PreparedRequest& p, const RunOptions& o) {
  DiffusionScoreOptions d;
  d.samples = o.score.samples;
  d.coupled = o.score.coupled;
  d.seed = p.seed;
  const DiffusionScore s = score_diffusion(session, p.ids, p.completion, d);
  nlohmann::json j{{"logprob", s.logprob}, {"stderr", s.stderr_}, {"samples", d.samples}, {"coupled", d.coupled}, {"seed", d.seed}};
  if (o.score.record_masks) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& x : s.samples) m.push_back({{"t", x.t}, {"weight", x.weight}, {"masked", x.masked}, {"loss", x.loss}});
    j["masks"] = m;
  }
  return j;
}

}  // namespace

void run_score(RunModel& s, const std::vector<PreparedRequest>& list, const CaptureSpec& spec, const RunOptions& o,
               Outputs& out, RunResult& res) {
  Session& session = *s.session();
  const bool diffusion = s.info().diffusion();
  for (const auto& p : list) {
    nlohmann::json j{{"id", p.id}, {"prompt_tokens", p.ids.size()}, {"completion_tokens", p.completion.size()}};
    j.update(diffusion ? score_masked(session, p, o) : score_ar(session, p, spec, out));
    res.scores.push_back(std::move(j));
    res.totals.prompts += 1;
    res.totals.prompt_tokens += static_cast<std::int64_t>(p.ids.size());
    res.totals.completion_tokens += static_cast<std::int64_t>(p.completion.size());
    if (!spec.hooks.empty()) res.totals.rows += static_cast<std::int64_t>(p.ids.size() + p.completion.size());
  }
  if (!o.results_path.empty()) {  // every line scored before the file appears
    const std::string partial = o.results_path + ".partial";
    {
      std::ofstream f(partial, std::ios::trunc);
      if (!f) bad_setting("output", "cannot write {}", partial);
      for (const auto& j : res.scores) f << j.dump() << "\n";
      if (!f.flush()) runtime_error("cannot write {}", partial);
    }
    out.close();
    std::filesystem::rename(partial, o.results_path);
    return;
  }
  out.close();
}

}  // namespace sonde::run_detail
