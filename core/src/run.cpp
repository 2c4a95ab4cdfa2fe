// run(): requests -> micro-batches -> the model's decoding or one forward pass -> sinks and
// results (run.h). Its parts: run_prepare.cpp (requests), run_outputs.cpp (sinks, results file,
// commit and resume), run_capture.cpp (the capture spec).
#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include "run_internal.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>

namespace sonde {
namespace {

using namespace run_detail;
using Clock = std::chrono::steady_clock;

struct Generated {
  std::vector<RequestResult> results;
  std::vector<CapturedPrompt> captured;  // per request; empty when nothing is captured
};

RequestResult result_of(const PreparedRequest& p) {
  RequestResult r;
  r.index = p.index;
  r.id = p.id;
  r.text = p.text;
  r.prompt_ids = p.ids;
  r.seed = p.seed;
  return r;
}

Generated generate_batch(RunModel& s, DecodeForward& fwd, const std::vector<const PreparedRequest*>& batch,
                         const CaptureSpec& spec, const RunOptions& o) {
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::int64_t> idx;
  std::vector<std::uint64_t> seeds;
  Generated g;
  for (const auto* p : batch) {
    prompts.push_back(p->ids);
    idx.push_back(p->index);
    seeds.push_back(p->seed);
    g.results.push_back(result_of(*p));
  }
  const GenerationSettings& settings = batch.front()->settings;  // equal across a micro-batch
  const Tokenizer* tok = s.tokenizer();
  if (s.info().decoding == DecodingKind::MaskedDiffusion) {
    DiffusionOptions d = resolve_diffusion(settings, s.config(), s.info());
    d.seeds = seeds;
    std::int64_t longest = 0;  // the left-padded prompt width
    for (const auto& p : prompts) longest = std::max(longest, static_cast<std::int64_t>(p.size()));
    DiffusionCallback on_step;
    if (o.record_history || o.on_step)
      on_step = [&](const DiffusionStep& st) {
        for (std::size_t r = 0; r < prompts.size(); ++r) {  // the canvas without its left padding
          const auto pad = longest - static_cast<std::int64_t>(prompts[r].size());
          const auto row = st.canvas.begin() + static_cast<std::int64_t>(r) * st.length;
          std::vector<std::int32_t> canvas(row + pad, row + st.length);
          if (o.on_step) o.on_step(batch[r]->index, st.step, canvas);
          if (o.record_history) g.results[r].history.push_back(std::move(canvas));
        }
      };
    auto cap = diffusion_generate_captured(fwd, prompts, d, spec, idx, on_step);
    for (std::size_t r = 0; r < batch.size(); ++r) {
      g.results[r].completion = cap.result.completions[r];
      const bool stopped = d.loop == DiffusionLoop::BlockDiffusion && !g.results[r].completion.empty() &&
                           g.results[r].completion.back() == d.stop_id;  // the one loop that stops
      g.results[r].finish_reason = stopped ? "eos" : "length";
    }
    g.captured = std::move(cap.captured);
  } else {
    ArOptions a = resolve_autoregressive(settings, s.config(), tok);
    a.seeds = seeds;
    a.use_cache = o.use_kv_cache;
    ArCallback on_step;
    if (o.on_token)
      on_step = [&](const ArStep& st) {
        for (std::size_t r = 0; r < batch.size(); ++r)
          if (st.new_tokens[r] >= 0) o.on_token(batch[r]->index, st.new_tokens[r]);
      };
    auto res = generate_autoregressive_captured(fwd, prompts, a, spec, idx, on_step);
    for (std::size_t r = 0; r < batch.size(); ++r) {
      g.results[r].completion = res.completions[r].tokens;
      g.results[r].finish_reason = res.completions[r].finish_reason;
    }
    g.captured = std::move(res.captured);
  }
  for (std::size_t r = 0; r < batch.size(); ++r) {
    const auto stop = settings.stop.value_or(std::vector<std::string>{});
    g.results[r].completion_text = completion_text(tok, s.info(), g.results[r].completion, stop);
  }
  return g;
}

PromptRecord prompt_record(const RequestResult& r) {
  PromptRecord rec;
  rec.prompt_idx = r.index;
  rec.id = r.id;
  rec.text = r.text;
  rec.completion = r.completion_text.value_or("");
  rec.finish_reason = r.finish_reason;
  rec.token_ids = r.prompt_ids;
  rec.token_ids.insert(rec.token_ids.end(), r.completion.begin(), r.completion.end());
  rec.seed = r.seed;
  return rec;
}

nlohmann::json result_line(const RequestResult& r) {
  return {{"id", r.id},
          {"completion", r.completion_text.value_or("")},
          {"completion_ids", r.completion},
          {"prompt_tokens", r.prompt_ids.size()},
          {"completion_tokens", r.completion.size()},
          {"finish_reason", r.finish_reason}};
}

RowKind forward_row_kind(const RunModel& s, const CaptureSpec& spec, std::int32_t id) {
  if (s.config().mask_token_id && *s.config().mask_token_id == id) return RowKind::Masked;
  return spec.is_special(id) ? RowKind::Special : RowKind::Prompt;
}

// One forward pass over one request: every hook at every position, /input_ids and /logits (unless
// the run asked for hooks only: RunOptions::forward_logits).
void run_forward(RunModel& s, const PreparedRequest& p, const CaptureSpec& spec, bool logits_wanted, Outputs& out,
                 RunResult& res) {
  const auto T = static_cast<std::int64_t>(p.ids.size());
  std::set<std::string> taps;
  for (const auto& h : spec.hooks) taps.insert(h.name);
  auto& sinks = out.sinks();
  s.begin_rows({T}, {p.id});
  Tensor logits = s.forward(p.ids, taps, [&](const std::string& hook, const TensorView& v) {
    Shape rows = v.shape;  // [1, T, ...] -> [T, ...]
    for (int k = 1; k < rows.rank; ++k) rows[k - 1] = rows[k];
    rows.rank -= 1;
    for (auto& sink : sinks)
      if (sink->wants(hook)) sink->write(TapRecord{hook, p.index}, v.reshaped(rows));
  }, logits_wanted);
  std::vector<RowRecord> rows;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int32_t id = p.ids[static_cast<std::size_t>(t)];
    rows.push_back({p.index, static_cast<std::int32_t>(t), id, -1, forward_row_kind(s, spec, id)});
  }
  RequestResult r = result_of(p);
  r.finish_reason = "forward";
  const PromptRecord rec = prompt_record(r);
  if (logits_wanted) {
    logits.view() = logits.view().reshaped(Shape{T, s.config().vocab_size});  // [1, T, V] -> [T, V], no copy
    res.logits = std::move(logits);
  }
  for (auto& sink : sinks) {
    sink->add_rows(rows);
    sink->end_prompt(rec);
    sink->write_array("/input_ids", TensorView(const_cast<std::int32_t*>(p.ids.data()), DType::i32, Shape{T}));
    if (logits_wanted) sink->write_array("/logits", res.logits.view());
  }
  res.totals = RunTotals{1, T, 0, static_cast<std::int64_t>(rows.size())};
  res.results.push_back(std::move(r));
}

// Request r of a generated group to every output, and into the run's totals.
void write_result(Generated& g, std::size_t r, Outputs& out, RunResult& res, const RunOptions& o) {
  const CapturedPrompt none;
  const CapturedPrompt& cap = g.captured.empty() ? none : g.captured[r];
  const auto line = result_line(g.results[r]);
  out.write(cap, prompt_record(g.results[r]), &line);
  res.totals.prompts += 1;
  res.totals.prompt_tokens += static_cast<std::int64_t>(g.results[r].prompt_ids.size());
  res.totals.completion_tokens += static_cast<std::int64_t>(g.results[r].completion.size());
  res.totals.rows += static_cast<std::int64_t>(cap.rows.size());
  if (o.keep_results) res.results.push_back(std::move(g.results[r]));
}

// Commits as a run goes: after each group of written requests (a micro-batch, or the requests an
// engine step ended), the agreed cancel flag, and a checkpoint when one is due or the run stops.
struct Commits {
  std::int64_t total = 0, start = 0, rows_before = 0, since = 0;
  Clock::time_point last = Clock::now();
  // Requests [0, next) are written; true when the run stops here (cancelled, resumable).
  bool after(std::int64_t next, bool wrote, Outputs& out, RunResult& res, const RunOptions& o,
             const std::function<bool(bool)>& agree) {
    if (wrote && o.on_progress) o.on_progress(RunProgress{total, start, res.totals});
    const bool cancelled = agree(o.cancel && o.cancel->load());
    const bool due = since >= o.checkpoint_every || Clock::now() - last >= std::chrono::duration<double>(o.checkpoint_seconds);
    if (out.committed() && since > 0 && (due || cancelled)) {
      out.checkpoint(next, rows_before + res.totals.rows);
      since = 0;
      last = Clock::now();
    }
    if (!cancelled || next >= total) return false;
    res.cancelled = true;
    out.abandon();  // not marked complete: a committed run resumes after its checkpoint
    return true;
  }
  void finish(std::int64_t next, Outputs& out, const RunResult& res) {
    if (out.committed()) out.checkpoint(next, rows_before + res.totals.rows);
    out.close();
  }
};

// The requests from the outputs' mark on as clients of the step-level engine (engine.h): each is
// its own decode loop with its capture, submitted as slots free up (batch_size slots; 0: all at
// once), its edits those of the run (every row), written in request order as they end, with
// checkpoints and cancel as the micro-batches had them. Bits equal the micro-batches' (the loops
// and kernels give a row the result it would get alone), so the files are the same.
void generate_on_engine(RunModel& s, EngineModel& em, const std::vector<PreparedRequest>& list, const CaptureSpec& spec,
                        const RunOptions& o, Outputs& out, RunResult& res, const std::function<bool(bool)>& agree) {
  const auto total = static_cast<std::int64_t>(list.size());
  const std::int64_t start = out.mark().prompts, rows_before = out.mark().rows;
  std::int64_t context = 2;
  for (std::int64_t i = start; i < total; ++i) {
    const auto& p = list[static_cast<std::size_t>(i)];
    context = std::max(context, static_cast<std::int64_t>(p.ids.size()) + resolve_max_new_tokens(p.settings, s.config()) + 1);
  }
  EngineOptions eo;
  eo.decoding = s.info().decoding;
  eo.slots = std::max<std::int64_t>(1, o.batch_size > 0 ? o.batch_size : total - start);
  eo.max_waiting = eo.slots;
  eo.max_context = context;
  eo.prefill_chunk = std::int64_t{1} << 40;  // a dataset prefills every arrival at once, as a micro-batch did
  // Loops run on the engine's threads: the caller's streaming callbacks are called one at a time.
  std::mutex callback_mu;
  RunOptions lo = o;
  if (o.on_token)
    lo.on_token = [&](std::int64_t r, std::int32_t t) {
      std::lock_guard lk(callback_mu);
      o.on_token(r, t);
    };
  if (o.on_step)
    lo.on_step = [&](std::int64_t r, std::int64_t st, const std::vector<std::int32_t>& c) {
      std::lock_guard lk(callback_mu);
      o.on_step(r, st, c);
    };
  std::vector<std::optional<Generated>> made(static_cast<std::size_t>(total));
  std::vector<std::shared_ptr<EngineHandle>> handles(static_cast<std::size_t>(total));
  Engine engine(em, eo);
  const auto submit = [&](std::int64_t i) {
    const PreparedRequest& p = list[static_cast<std::size_t>(i)];
    EngineRequest q;
    q.id = p.id;
    q.prompt = p.ids;
    q.events = false;
    q.loop = [&, i](EngineForward& fwd) {
      made[static_cast<std::size_t>(i)] = generate_batch(s, fwd, {&list[static_cast<std::size_t>(i)]}, spec, lo);
      return EngineResult{};
    };
    handles[static_cast<std::size_t>(i)] = engine.submit(std::move(q));
  };
  Commits commits{total, start, rows_before};
  std::int64_t next_submit = start, next = start;
  while (next < total) {
    // A request that has ended frees its slot at the engine's next step, when the next one joins.
    std::int64_t in_flight = 0;
    for (std::int64_t i = next; i < next_submit; ++i) in_flight += handles[static_cast<std::size_t>(i)]->done() ? 0 : 1;
    for (; next_submit < total && in_flight < eo.slots; ++in_flight) submit(next_submit++);
    engine.step();
    bool wrote = false;
    for (; next < next_submit && handles[static_cast<std::size_t>(next)]->done(); ++next, wrote = true) {
      const EngineResult r = handles[static_cast<std::size_t>(next)]->wait();
      if (r.finish_reason == "error") throw Error(static_cast<ErrorKind>(r.error_kind), r.error);
      write_result(*made[static_cast<std::size_t>(next)], 0, out, res, o);
      made[static_cast<std::size_t>(next)].reset();
      ++commits.since;
    }
    if (commits.after(next, wrote, out, res, o, agree)) return;
  }
  commits.finish(next, out, res);
}

// A sink's path that is a directory is a data-parallel run's (its ranks' parts and run.h5, or one
// made for it): one process writes one file and cannot resume those parts.
void check_one_process_outputs(const RunOptions& o) {
  for (const auto& s : o.sinks) {
    if (s.path.empty() || !std::filesystem::is_directory(s.path)) continue;
    if (o.resume)
      bad_setting(s.name.c_str(), "{} is the directory of a data-parallel run (one file per model copy): resume it under "
                  "mpiexec with the same number of model copies", s.path);
    bad_setting(s.name.c_str(), "{} is a directory, but a run of one process writes one file: give a file path", s.path);
  }
}

}  // namespace

namespace run_detail {

void generate_all(RunModel& s, const std::vector<PreparedRequest>& list, const CaptureSpec& spec, const RunOptions& o,
                  Outputs& out, RunResult& res, const std::function<bool(bool)>& agree) {
  const auto note = [&](const std::string& m) {
    if (o.on_note) o.on_note(m);
  };
  const auto total = static_cast<std::int64_t>(list.size());
  const std::int64_t start = out.mark().prompts, rows_before = out.mark().rows;
  if (start > total) runtime_error("resume: the run committed {} requests but is given {}", start, total);
  res.committed_before = start;
  if (start > 0) note(fmt::format("resuming after {} committed prompts", start));

  if (EngineModel* em = s.engine_model(); em && o.tensor_parallel <= 1)
    return generate_on_engine(s, *em, list, spec, o, out, res, agree);
  DecodeForward& fwd = s.decoder();
  Commits commits{total, start, rows_before};
  std::int64_t next = start;
  while (next < total) {
    // Block diffusion runs each prompt as its own sequence (its blocks follow the prompt's length).
    const bool alone = s.info().diffusion() && s.info().diffusion_loop == DiffusionLoop::BlockDiffusion;
    const auto batch = next_batch(list, static_cast<std::size_t>(next), alone ? 1 : o.batch_size);
    std::vector<std::int64_t> lens;
    std::vector<std::string> ids;
    for (const auto* p : batch) {
      lens.push_back(static_cast<std::int64_t>(p->ids.size()));
      ids.push_back(p->id);
    }
    s.begin_rows(lens, ids);
    Generated g = generate_batch(s, fwd, batch, spec, o);
    for (std::size_t r = 0; r < batch.size(); ++r) write_result(g, r, out, res, o);
    next += static_cast<std::int64_t>(batch.size());
    commits.since += static_cast<std::int64_t>(batch.size());
    if (commits.after(next, true, out, res, o, agree)) return;
  }
  commits.finish(next, out, res);
}

}  // namespace run_detail

RunResult run(RunModel& s, const std::vector<Request>& requests, const RunOptions& o) {
  o.capture.check();
  // On several ranks the front end checked before any rank wrote; here another rank's files may
  // already be there.
  if (!o.job || o.job->size() <= 1) {
    check_outputs(o);
    check_one_process_outputs(o);
  }
  if (o.kind == RunKind::Forward && requests.size() != 1)
    bad_input("a forward pass runs one request, got {}", requests.size());
  if (o.kind == RunKind::Lens && requests.size() != 1) bad_input("the lens runs one request, got {}", requests.size());
  if ((o.kind == RunKind::Score || o.kind == RunKind::Lens) && !s.session())
    runtime_error("a {} run needs a loaded session", run_kind_name(o.kind));
  if (o.kind == RunKind::Score && !o.capture.hooks.empty() && s.info().diffusion())
    bad_setting("hooks", "capturing while scoring is for autoregressive models ({} is not)", s.info().arch);
  if (o.kind == RunKind::Lens && !o.capture.hooks.empty()) bad_setting("hooks", "the lens captures no hooks");
  if (o.kind == RunKind::Lens && o.lens.top_k < 1) bad_setting("top_k", "must be at least 1, got {}", o.lens.top_k);
  if (o.kind == RunKind::Lens && o.lens.diffusion && !s.info().diffusion())
    bad_setting("diffusion", "model {} is not a diffusion model", s.info().arch);
  if (o.kind == RunKind::Score && (o.score.samples < 1 || (o.score.coupled && o.score.samples % 2)))
    bad_setting("samples", "{} (with coupled an even number >= 2)", o.score.samples);
  const auto note = [&](const std::string& m) {
    if (o.on_note) o.on_note(m);
  };
  RunResult res;
  const auto prepared = prepare(s, requests, o, res.skipped);
  for (const auto& why : res.skipped) note("skipped " + why);
  // The model keeps the run's edits until the run ends, however it ends.
  struct EditsOn {
    RunModel& s;
    bool on;
    ~EditsOn() {
      if (on) s.set_edits({});
    }
  } edits_on{s, !o.edits.empty()};
  if (!o.edits.empty()) s.set_edits(run_edits(s, o, prepared));
  CaptureSpec spec = make_capture_spec(s, o.capture, o.kind == RunKind::Forward);
  if (o.sinks.empty()) {  // nowhere to go: nothing is captured
    spec.hooks.clear();
    spec.record_steps = false;
  }
  if (o.kind == RunKind::Forward)  // one sequence: attention patterns have exactly T keys per row
    for (auto& h : spec.hooks)
      std::replace(h.row_shape.begin(), h.row_shape.end(), kKeysDim, static_cast<std::int64_t>(prepared[0].ids.size()));
  res.hooks = spec.hooks;

  const bool diffusion = o.kind == RunKind::Generate && spec.record_steps;
  const JobLayout job = job_layout(o);
  // A committed run on several ranks goes through the parts and the join even with one model copy
  // (its ranks split the model): its first rank writes, the others run in step.
  if (o.kind == RunKind::Generate && (job.replicas() > 1 || (job.world > 1 && !o.results_path.empty()))) {
    run_data_parallel(s, prepared, spec, o, job, diffusion, res);
    return res;
  }
  const auto config = run_config(s, o, prepared);
  RunMetadata meta = run_metadata(s, config, o.capture.storage);
  if (o.kind == RunKind::Score || o.kind == RunKind::Lens) {  // one-shot outputs; Score writes its own lines
    if (o.kind == RunKind::Lens) meta.strings["kind"] = o.lens.diffusion ? "logit_lens_diffusion" : "logit_lens";
    RunOptions one_shot = o;
    one_shot.results_path.clear();
    Outputs out(one_shot, spec, meta, false);
    if (o.kind == RunKind::Score) run_score(s, prepared, spec, o, out, res);
    else run_lens(s, prepared[0], o, out, res);
    return res;
  }
  Outputs out(o, spec, meta, diffusion);
  if (o.kind == RunKind::Forward) {
    run_forward(s, prepared[0], spec, o.forward_logits, out, res);
    out.close();
    return res;
  }
  generate_all(s, prepared, spec, o, out, res, [](bool c) { return c; });
  return res;
}


}  // namespace sonde
