// sonde._sonde: the engine for the Python package (sonde/__init__.py). Thin: it opens a
// Session and calls the run layer (run.h) with requests and options the package builds as JSON;
// every piece of policy (defaults, checks, capture, decoding) is the run layer's, as for the CLI.
#include "arrays.h"
#include "job.h"
#include "loaded.h"
#include "memory_sink.h"
#include "options.h"
#include "report.h"
#include "sae_bind.h"
#include "submit.h"

#include <sonde/chat.h>
#include <sonde/dataset.h>
#include <sonde/edit_spec.h>
#include <sonde/edits.h>
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/run.h>
#include <sonde/session.h>
#include <sonde/tokenizer.h>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <dlfcn.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>

namespace pb = pybind11;
using namespace pybind11::literals;

namespace sonde::py {
namespace {

// Plugins live in lib/sonde beside libsonde_core, in the build tree and in an install alike;
// the python executable's own directory says nothing about them.
std::string plugin_dir_beside_core() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&Session::open), &info) || !info.dli_fname) return {};
  return (std::filesystem::path(info.dli_fname).parent_path() / "sonde").string();
}

const Tokenizer& tokenizer_of(const Loaded& e) {
  const Tokenizer* t = e.session->tokenizer();
  if (!t)
    bad_input("{} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); give token ids instead",
              e.session->model_dir().string());
  return *t;
}

// What a finished run hands back, converted with the GIL held.
struct Outcome {
  RunResult result;
  std::shared_ptr<MemorySink> memory;
};

pb::array int_array(const std::vector<std::int32_t>& v) {
  return owned_array(std::vector<std::int32_t>(v), {static_cast<pb::ssize_t>(v.size())});
}

pb::dict hook_arrays(MemorySink& m) {
  pb::dict cache;
  for (auto& [name, h] : m.hooks()) {
    std::vector<pb::ssize_t> shape{static_cast<pb::ssize_t>(h.rows)};
    for (auto d : h.row_shape) shape.push_back(d);
    if (h.sparse) shape = {static_cast<pb::ssize_t>(h.indices.size())};  // the kept values
    if (m.storage() == DType::f32)
      cache[name.c_str()] = owned_array(std::move(h.f32), shape);
    else
      cache[name.c_str()] = owned_array(std::move(h.half), shape, pb::dtype(m.storage() == DType::bf16 ? "uint16" : "float16"));
    if (h.sparse) {  // (data, indices, indptr, n_cols): _model.py makes it a SparseRows
      const auto nnz = static_cast<pb::ssize_t>(h.indices.size()), rows = static_cast<pb::ssize_t>(h.indptr.size());
      cache[name.c_str()] = pb::make_tuple(cache[name.c_str()], owned_array(std::move(h.indices), {nnz}),
                                           owned_array(std::move(h.indptr), {rows}), h.row_shape.at(0));
    }
  }
  return cache;
}

pb::dict row_table(const std::vector<RowRecord>& rows) {
  std::vector<std::int64_t> prompt;
  std::vector<std::int32_t> pos, token, step, computed_step;
  std::vector<std::uint8_t> kind, fresh;
  for (const auto& r : rows) {
    prompt.push_back(r.prompt_idx);
    pos.push_back(r.pos);
    token.push_back(r.token_id);
    step.push_back(r.step);
    kind.push_back(static_cast<std::uint8_t>(r.kind));
    fresh.push_back(r.fresh);
    computed_step.push_back(r.computed_step);
  }
  const std::vector<pb::ssize_t> n{static_cast<pb::ssize_t>(rows.size())};
  return pb::dict("prompt_idx"_a = owned_array(std::move(prompt), n), "pos"_a = owned_array(std::move(pos), n),
                  "token_id"_a = owned_array(std::move(token), n), "step"_a = owned_array(std::move(step), n),
                  "kind"_a = owned_array(std::move(kind), n), "fresh"_a = owned_array(std::move(fresh), n),
                  "computed_step"_a = owned_array(std::move(computed_step), n));
}

pb::list step_table(const std::vector<StepRecord>& steps) {
  pb::list out;
  for (const auto& s : steps)
    out.append(pb::dict("prompt_idx"_a = s.prompt_idx, "step"_a = s.step, "t"_a = s.t, "n_transfer"_a = s.n_transfer,
                        "canvas"_a = int_array(s.canvas)));
  return out;
}

// A lens's cells as arrays: top_ids, top_probs [L, T, K], next_rank, next_prob [L, T] (the file's
// /lens/* of sonde lens --out), and its logits [T, V] when it has them.
pb::dict lens_dict(LensResult& r) {
  const pb::ssize_t L = r.layers, T = r.tokens, K = r.top_k;
  std::vector<std::int32_t> ids;
  std::vector<float> probs, next_prob;
  std::vector<std::int64_t> next_rank;
  for (const auto& c : r.cells) {
    ids.insert(ids.end(), c.top_ids.begin(), c.top_ids.end());
    probs.insert(probs.end(), c.top_probs.begin(), c.top_probs.end());
    next_rank.push_back(c.next_rank);
    next_prob.push_back(c.next_prob);
  }
  pb::dict d("top_ids"_a = owned_array(std::move(ids), {L, T, K}), "top_probs"_a = owned_array(std::move(probs), {L, T, K}),
             "next_rank"_a = owned_array(std::move(next_rank), {L, T}), "next_prob"_a = owned_array(std::move(next_prob), {L, T}));
  if (!r.logits.empty()) {
    const auto V = r.logits.shape()[r.logits.shape().rank - 1];
    d["logits"] = owned_array(std::move(r.logits), {T, V});
    d["last_layer_logits"] = owned_array(std::move(r.last_logits), {T, V});
  }
  return d;
}

pb::dict outcome_dict(Outcome& o) {
  RunResult& r = o.result;
  pb::list results;
  for (const auto& q : r.results) {
    pb::list history;
    for (const auto& h : q.history) history.append(int_array(h));
    pb::object text = q.completion_text ? pb::object(pb::str(*q.completion_text)) : pb::none();
    results.append(pb::dict("index"_a = q.index, "id"_a = q.id, "text"_a = q.text, "prompt_ids"_a = int_array(q.prompt_ids),
                            "completion"_a = int_array(q.completion), "completion_text"_a = text,
                            "finish_reason"_a = q.finish_reason, "seed"_a = q.seed, "history"_a = history));
  }
  pb::list hooks;
  for (const auto& h : r.hooks) hooks.append(pb::make_tuple(h.name, pb::tuple(pb::cast(h.row_shape))));
  pb::object logits = pb::none();
  if (!r.logits.empty()) {
    const auto shape = r.logits.shape();
    logits = owned_array(std::move(r.logits), {shape[0], shape[1]});
  }
  pb::dict out("results"_a = results, "hooks"_a = hooks, "logits"_a = logits, "cancelled"_a = r.cancelled,
               "skipped"_a = r.skipped, "committed_before"_a = r.committed_before,
               "totals"_a = pb::dict("prompts"_a = r.totals.prompts, "prompt_tokens"_a = r.totals.prompt_tokens,
                                     "completion_tokens"_a = r.totals.completion_tokens, "rows"_a = r.totals.rows));
  pb::list scores;  // each a JSON line, as the results file holds it
  for (const auto& j : r.scores) scores.append(pb::str(j.dump()));
  out["scores"] = scores;
  if (r.lens) out["lens"] = lens_dict(*r.lens);
  if (r.lens_steps) {
    pb::list per_step;
    for (auto& l : r.lens_steps->per_step) per_step.append(lens_dict(l));
    out["lens"] = pb::dict("steps"_a = r.lens_steps->steps, "sequence"_a = int_array(r.lens_steps->sequence),
                           "per_step"_a = per_step);
  }
  if (o.memory) {
    out["cache"] = hook_arrays(*o.memory);
    out["rows"] = row_table(o.memory->rows());
    out["steps"] = step_table(o.memory->steps());
  }
  return out;
}

pb::object event_object(const Event& e) {
  switch (e.kind) {
    case Event::Kind::Token:
      return pb::make_tuple("token", e.request, e.token);
    case Event::Kind::Step:
      return pb::make_tuple("step", e.request, e.step, int_array(e.canvas));
    case Event::Kind::Progress:
      return pb::make_tuple("progress", e.progress.total, e.progress.committed, e.progress.totals.prompts,
                            e.progress.totals.completion_tokens);
  }
  return pb::none();
}

// A Python hook that raised: its exception, re-raised by Job.result() as the cause of a
// sonde.HookError naming the hook. A std::exception, as it may leave a request's loop on the
// engine's threads, which keep only its message: the job's HookFailure keeps the rest.
struct PyHookError : std::exception {
  PyHookError(std::string h, pb::error_already_set e)
      : hook(std::move(h)), error(std::move(e)), message("hook '" + hook + "' raised " + error.what()) {}
  const char* what() const noexcept override { return message.c_str(); }
  std::string hook;
  pb::error_already_set error;
  std::string message;
};

// The first hook error of a job, whichever thread it was raised on.
struct HookFailure {
  std::mutex mu;
  std::optional<PyHookError> first;
  [[noreturn]] void raise(PyHookError e) {
    {
      std::lock_guard lock(mu);
      if (!first) first.emplace(e);
    }
    throw e;
  }
};

pb::object& hook_error_type() {
  static pb::object t;
  return t;
}

[[noreturn]] void raise_hook_error(PyHookError& h) {
  h.error.restore();
  pb::raise_from(hook_error_type().ptr(), h.message.c_str());
  throw pb::error_already_set();
}

// A view of `v` for Python without a copy: valid only while the hook runs (the executor owns it).
pb::array borrowed(const TensorView& v, pb::dtype dt) {
  std::vector<pb::ssize_t> shape, strides;
  for (int k = 0; k < v.shape.rank; ++k) {
    shape.push_back(v.shape[k]);
    strides.push_back(v.strides[k] * static_cast<pb::ssize_t>(dt.itemsize()));
  }
  pb::capsule none(v.data, [](void*) {});
  return pb::array(dt, shape, strides, v.data, none);
}

// fn(x, ctx) at the hook's node: x the writable [B, T, *row] f32 value; a returned array replaces it.
EditFn host_fn(pb::object fn, std::shared_ptr<HookFailure> failure) {
  auto held = std::shared_ptr<pb::object>(new pb::object(std::move(fn)), [](pb::object* o) {
    pb::gil_scoped_acquire gil;
    delete o;
  });
  return [held, failure](const HostEditContext& c) {
    pb::gil_scoped_acquire gil;
    try {
      pb::array x = borrowed(c.value, pb::dtype::of<float>());
      // Kept for the process (never destroyed after the interpreter is gone).
      static auto* ns = new pb::object(pb::module_::import("types").attr("SimpleNamespace"));
      pb::object ctx = (*ns)("hook"_a = c.hook, "positions"_a = borrowed(c.positions, pb::dtype::of<std::int32_t>()),
                          "selected"_a = borrowed(c.selected, pb::dtype::of<std::uint8_t>()), "step"_a = c.step);
      pb::object out = (*held)(x, ctx);
      if (out.is_none() || out.is(x)) return;
      auto r = pb::array_t<float, pb::array::c_style | pb::array::forcecast>::ensure(out);
      if (!r) throw pb::type_error("a hook returns None or an array");
      if (r.size() != x.size()) {
        std::string want, got;
        for (pb::ssize_t k = 0; k < x.ndim(); ++k) want += (k ? ", " : "") + std::to_string(x.shape(k));
        for (pb::ssize_t k = 0; k < r.ndim(); ++k) got += (k ? ", " : "") + std::to_string(r.shape(k));
        throw pb::value_error("the hook returned shape [" + got + "], not the value's [" + want + "]");
      }
      std::copy(r.data(), r.data() + r.size(), static_cast<float*>(c.value.data));
    } catch (pb::error_already_set& e) {
      failure->raise(PyHookError(c.hook, std::move(e)));
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      failure->raise(PyHookError(c.hook, pb::error_already_set()));
    }
  };
}

// The worker thread's Python thread state, kept for the whole run when it calls Python hooks:
// without it each call's GIL acquisition would create and destroy one (tens of microseconds).
struct PythonThread {
  PyGILState_STATE gil;
  PyThreadState* state;
  PythonThread() : gil(PyGILState_Ensure()), state(PyEval_SaveThread()) {}
  ~PythonThread() {
    PyEval_RestoreThread(state);
    PyGILState_Release(gil);
  }
};

// A started run: the Job and, when it has ended, its outcome.
struct PyJob {
  std::shared_ptr<Loaded> engine;
  std::shared_ptr<HookFailure> hook_failure = std::make_shared<HookFailure>();
  std::unique_ptr<Outcome> outcome = std::make_unique<Outcome>();
  std::unique_ptr<Job> job;
  ~PyJob() {  // joining the worker, which may need the GIL to finish
    pb::gil_scoped_release nogil;
    job.reset();
  }
};

// host_hooks: [(hook selection, fn, positions, steps)], run as host edits (edits.h).
std::unique_ptr<PyJob> start(std::shared_ptr<Loaded> engine, const std::string& requests_json,
                             const std::string& options_json, const pb::list& host_hooks) {
  auto pj = std::make_unique<PyJob>();
  pj->engine = engine;
  auto spec = std::make_shared<CallSpec>(parse_call(requests_json, options_json));
  for (const auto& item : host_hooks) {
    auto t = item.cast<pb::tuple>();
    EditSpec e;
    e.hook = t[0].cast<std::string>();
    e.where = "hooks: " + e.hook;
    e.op = "host";
    e.fn = host_fn(pb::reinterpret_borrow<pb::object>(t[1]), pj->hook_failure);
    e.positions = nlohmann::json::parse(t[2].cast<std::string>());
    e.steps = t[3].cast<std::string>();
    spec->options.edits.push_back(std::move(e));
  }
  Outcome* outcome = pj->outcome.get();
  if (spec->memory) {
    outcome->memory = std::make_shared<MemorySink>();
    spec->options.sinks.push_back(SinkSpec{"memory", "", false, outcome->memory});
  }
  const bool python_hooks = !spec->options.edits.empty() && pb::len(host_hooks) > 0;
  pj->job = std::make_unique<Job>([engine, spec, outcome, python_hooks](Job& job) {
    std::optional<PythonThread> python;
    if (python_hooks) python.emplace();
    RunOptions& o = spec->options;
    o.cancel = job.cancel_flag();
    // The callbacks also let Ctrl-C stop a run at its next token or step, not only between
    // micro-batches (a committed run, sonde.batch, stops between them, at a checkpoint); events
    // are queued only for the generator form.
    const bool stream = spec->stream, stop_now = spec->stop_mid_batch;
    o.on_token = [&job, stream, stop_now](std::int64_t request, std::int32_t token) {
      if (stop_now && job.cancelled()) throw Cancelled{};
      if (stream) job.push(Event{Event::Kind::Token, request, 0, token, {}, {}});
    };
    o.on_step = [&job, stream, stop_now](std::int64_t request, std::int64_t step, const std::vector<std::int32_t>& canvas) {
      if (stop_now && job.cancelled()) throw Cancelled{};
      if (stream) job.push(Event{Event::Kind::Step, request, step, 0, canvas, {}});
    };
    if (spec->progress)
      o.on_progress = [&job](const RunProgress& p) { job.push(Event{Event::Kind::Progress, 0, 0, 0, {}, p}); };
    std::vector<Request> requests = std::move(spec->requests);
    if (!spec->dataset.empty())
      requests = o.kind == RunKind::Score ? read_score_dataset(spec->dataset).requests
                                          : read_dataset(spec->dataset, spec->skip_bad).requests;
    std::lock_guard lock(engine->mu);
    // The Session's edits are this run's now; the engine's (each tagged with its request, which
    // a run's rows would all take) are set again before its next forward (loaded.h).
    ++engine->runs;
    if (!engine->session->edits().empty()) engine->session->set_edits({});
    outcome->result = run(*engine->session, requests, o);
  });
  return pj;
}


// ---- Model.submit ----------------------------------------------------------------------------------

// One forward's rows of a hook, [1, T, *row] as the engine tapped them, as a float32 [T, *row].
pb::array tapped_array(Tensor&& t) {
  const Shape sh = t.shape();
  std::vector<pb::ssize_t> shape;
  for (int k = 1; k < sh.rank; ++k) shape.push_back(sh[k]);
  if (sh.rank < 2 || sh[0] != 1) runtime_error("submit: a tapped value of {} rows, not 1", sh.rank ? sh[0] : 0);
  if (t.dtype() == DType::f32) return owned_array(std::move(t), shape);
  const auto n = static_cast<std::size_t>(t.view().numel());
  std::vector<float> f(n);
  const auto* bits = static_cast<const std::uint16_t*>(t.view().data);
  if (t.dtype() == DType::bf16)
    for (std::size_t i = 0; i < n; ++i) f[i] = bf16_to_f32(bits[i]);
  else if (t.dtype() == DType::f16)
    for (std::size_t i = 0; i < n; ++i) f[i] = f16_to_f32(bits[i]);
  else
    runtime_error("submit: a tapped value of dtype {}", dtype_name(t.dtype()));
  return owned_array(std::move(f), shape);
}

pb::list stream_items(const std::vector<StreamItem>& items, bool diffusion) {
  pb::list out;
  for (const auto& it : items)
    out.append(diffusion ? pb::make_tuple(it.step, int_array(it.canvas)) : pb::make_tuple(it.step, it.token));
  return out;
}

// The ended request's result; its error (finish_reason "error") raised as BadInput or RuntimeFailure.
pb::dict submitted_result(Submitted& s) {
  EngineResult r;
  {
    pb::gil_scoped_release nogil;
    r = s.handle->wait();
    s.stream->wait_end();
  }
  if (r.finish_reason == "error") {
    if (r.error_kind == 2) throw Error(ErrorKind::BadInput, r.error);
    throw Error(ErrorKind::Runtime, r.error);
  }
  // A cancelled loop hands back nothing: the tokens it streamed are what it made.
  if (r.finish_reason == "cancelled" && !s.diffusion) r.tokens = s.stream->tokens();
  Session& session = *s.model->session;
  const auto text = completion_text(session.tokenizer(), session.info(), r.tokens, s.stop);
  pb::list history;
  for (const auto& h : s.stream->history()) history.append(int_array(h));
  pb::dict acts;
  for (auto& [hook, parts] : s.stream->take_acts()) {
    pb::list arrays;
    for (auto& t : parts) arrays.append(tapped_array(std::move(t)));
    acts[hook.c_str()] = arrays;
  }
  return pb::dict("id"_a = s.id, "prompt_ids"_a = int_array(r.prompt), "completion"_a = int_array(r.tokens),
                  "completion_text"_a = text ? pb::object(pb::str(*text)) : pb::none(),
                  "finish_reason"_a = r.finish_reason, "seed"_a = s.seed, "history"_a = history, "acts"_a = acts,
                  "forwards"_a = r.forwards, "first_seconds"_a = s.stream->first_seconds(),
                  "end_seconds"_a = s.stream->end_seconds());
}

pb::dict stats_dict(const EngineStats& st) {
  return pb::dict("waiting"_a = st.waiting, "running"_a = st.running, "kv_rows"_a = st.kv_rows, "steps"_a = st.steps,
                  "forwards"_a = st.forwards, "submitted"_a = st.submitted, "finished"_a = st.finished,
                  "threads"_a = st.threads, "kv_filled"_a = st.kv_filled, "kv_capacity"_a = st.kv_capacity,
                  "prefill_s"_a = st.prefill_s, "decode_s"_a = st.decode_s, "other_forward_s"_a = st.other_forward_s,
                  "copy_s"_a = st.copy_s, "wait_s"_a = st.wait_s, "idle_s"_a = st.idle_s,
                  "prefill_forwards"_a = st.prefill_forwards, "prefill_tokens"_a = st.prefill_tokens,
                  "decode_forwards"_a = st.decode_forwards, "decode_rows"_a = st.decode_rows);
}

}  // namespace
}  // namespace sonde::py

PYBIND11_MODULE(_sonde, m) {
  sonde::py::bind_sae(m);
  using namespace sonde;
  using namespace sonde::py;
  m.doc() = "sonde's engine; use the sonde package, not this module";
  init_logging("warn");

  // The CLI's exit codes 2 and 1: bad input (a ValueError) and a runtime failure (a RuntimeError).
  static pb::exception<Error> base(m, "Error");
  static pb::object bad_input_type = pb::reinterpret_steal<pb::object>(
      PyErr_NewException("sonde.BadInput", pb::make_tuple(base, pb::handle(PyExc_ValueError)).ptr(), nullptr));
  static pb::object runtime_type = pb::reinterpret_steal<pb::object>(
      PyErr_NewException("sonde.RuntimeFailure", pb::make_tuple(base, pb::handle(PyExc_RuntimeError)).ptr(), nullptr));
  m.attr("BadInput") = bad_input_type;
  m.attr("RuntimeFailure") = runtime_type;
  // A Python hook raised; its exception is the __cause__.
  hook_error_type() = pb::reinterpret_steal<pb::object>(
      PyErr_NewException("sonde.HookError", pb::make_tuple(runtime_type).ptr(), nullptr));
  m.attr("HookError") = hook_error_type();
  pb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString((e.kind() == ErrorKind::BadInput ? bad_input_type : runtime_type).ptr(), e.what());
    } catch (const Cancelled&) {
      PyErr_SetNone(PyExc_KeyboardInterrupt);
    }
  });
  bind_report(m);

  pb::class_<Loaded, std::shared_ptr<Loaded>>(m, "Engine")
      .def(pb::init([](const std::string& model, const std::string& backend, int threads, const std::string& weights,
                       const std::string& plugin_dir, const std::string& compute) {
             SessionOptions o;
             o.model = model;
             o.backend = backend;
             o.threads = threads;
             o.weights = weights;
             o.compute = compute;
             o.plugin_dir = plugin_dir.empty() ? plugin_dir_beside_core() : plugin_dir;
             auto e = std::make_shared<Loaded>();
             pb::gil_scoped_release nogil;
             e->session = Session::open(o);
             return e;
           }),
           "model"_a, "backend"_a = "", "threads"_a = 0, "weights"_a = "native", "plugin_dir"_a = "",
           "compute"_a = "f32")
      .def_property_readonly("config_json", [](Loaded& e) { return e.session->config().raw_json; })
      .def_property_readonly("arch", [](Loaded& e) { return e.session->info().arch; })
      .def_property_readonly("diffusion",
                             [](Loaded& e) { return e.session->info().diffusion(); })
      .def_property_readonly("backend", [](Loaded& e) { return e.session->backend_name(); })
      .def_property_readonly("compute", [](Loaded& e) { return e.session->compute(); })
      .def_property_readonly("model_dir", [](Loaded& e) { return e.session->model_dir().string(); })
      .def_property_readonly("has_tokenizer", [](Loaded& e) { return e.session->tokenizer() != nullptr; })
      .def("hook_points",
           [](Loaded& e) {
             pb::list out;
             for (const auto& h : e.session->hook_points()) out.append(pb::make_tuple(h.name, pb::tuple(pb::cast(h.row_shape))));
             return out;
           })
      .def("attach_sae",
           [](Loaded& e, const PySae& sae, bool splice, bool error_term) {
             pb::gil_scoped_release nogil;
             const auto& a = e.session->attach_sae(sae.sae, splice, error_term);
             return saes_json({a}).at(0).dump();
           },
           "sae"_a, "splice"_a = false, "error_term"_a = false)
      .def("encode", [](Loaded& e, const std::string& text) { return tokenizer_of(e).encode(text); })
      .def("decode",
           [](Loaded& e, const std::vector<std::int32_t>& ids, bool skip_special) {
             return pb::bytes(tokenizer_of(e).decode(ids, skip_special));
           },
           "ids"_a, "skip_special"_a = false)
      .def("chat",
           [](Loaded& e, const std::vector<std::pair<std::string, std::string>>& messages, bool add_generation_prompt) {
             std::vector<ChatMessage> ms;
             for (const auto& [role, content] : messages) ms.push_back({role, content});
             return apply_chat_template(ms, tokenizer_of(e).chat_template(), add_generation_prompt);
           })
      .def("start", &start, "requests_json"_a, "options_json"_a, "host_hooks"_a = pb::list())
      // core's overwrite policy (run.h, check_outputs) before a run starts, its settings named as
      // sonde.batch's keywords
      .def("check_outputs",
           [](Loaded&, const std::string& options_json) {
             const CallSpec c = parse_call("[]", options_json);
             try {
               check_outputs(c.options);
             } catch (const Error& e) {
               const std::string& s = e.setting();
               if (s.empty()) throw;
               const bool out = c.options.kind == RunKind::Score || c.options.kind == RunKind::Lens;  // their keyword: out
               throw Error(e.kind(), fmt::format("{}: {}", s == "hdf5" ? (out ? "out" : "acts") : s, e.detail()));
             }
           })
      .def("submit",
           [](std::shared_ptr<Loaded> e, const std::string& request_json, const std::string& options_json) {
             pb::gil_scoped_release nogil;
             return submit(std::move(e), request_json, options_json);
           })
      .def("configure_engine",
           [](Loaded& e, std::int64_t slots, std::int64_t max_waiting, std::int64_t max_context, std::int64_t prefill_chunk) {
             EngineOptions o;
             o.slots = slots;
             o.max_waiting = max_waiting;
             o.max_context = max_context;
             o.prefill_chunk = prefill_chunk;
             pb::gil_scoped_release nogil;
             e.configure(o);
           },
           "slots"_a, "max_waiting"_a, "max_context"_a, "prefill_chunk"_a)
      .def("engine_options",
           [](Loaded& e) {
             const EngineOptions o = e.options();
             return pb::dict("slots"_a = o.slots, "max_waiting"_a = o.max_waiting, "max_context"_a = o.max_context,
                             "prefill_chunk"_a = o.prefill_chunk);
           })
      .def("engine_stats", [](Loaded& e) {
        EngineStats st;
        {
          pb::gil_scoped_release nogil;
          st = e.stats();
        }
        return stats_dict(st);
      });

  pb::class_<Submitted>(m, "Submitted")
      .def_property_readonly("engine_id", [](Submitted& s) { return s.handle->id(); })
      .def_property_readonly("id", [](Submitted& s) { return s.id; })
      .def_property_readonly("diffusion", [](Submitted& s) { return s.diffusion; })
      // (items, ended): (step, token) or (step, canvas) items after waiting up to `seconds`.
      .def("poll",
           [](Submitted& s, double seconds) {
             std::vector<StreamItem> items;
             bool ended = false;
             {
               pb::gil_scoped_release nogil;
               items = s.stream->take(seconds, ended);
               // A request cancelled before it started never ran its loop, which ends the stream.
               if (!ended && s.handle->done()) {
                 auto more = s.stream->take(0, ended);
                 items.insert(items.end(), more.begin(), more.end());
                 ended = true;
               }
             }
             return pb::make_tuple(stream_items(items, s.diffusion), ended);
           },
           "seconds"_a)
      .def("fileno", [](Submitted& s) { return s.stream->fileno(); })
      .def("drain", [](Submitted& s) { s.stream->drain(); })
      .def("close_pipe", [](Submitted& s) { s.stream->close_pipe(); })
      .def("done", [](Submitted& s) { return s.handle->done(); })
      .def("cancel",
           [](Submitted& s) {
             pb::gil_scoped_release nogil;
             const bool now = s.model->cancel(s.generation, s.handle->id());
             if (s.handle->done()) s.stream->end();  // a waiting request ends at once, without its loop
             return now;
           })
      .def("result", &submitted_result);

  pb::class_<PyJob>(m, "Job")
      .def("wait",
           [](PyJob& j, double seconds) {
             std::vector<Event> events;
             {
               pb::gil_scoped_release nogil;
               events = j.job->wait(seconds);
             }
             pb::list out;
             for (const auto& e : events) out.append(event_object(e));
             return out;
           })
      .def("done", [](PyJob& j) { return j.job->done(); })
      .def("cancel", [](PyJob& j) { j.job->cancel(); })
      .def("result", [](PyJob& j) {
        try {
          pb::gil_scoped_release nogil;
          j.job->join();
        } catch (PyHookError& h) {
          raise_hook_error(h);
        } catch (const Error&) {  // a hook's error as a request on the engine ended with it
          std::optional<PyHookError> h;
          {
            std::lock_guard lock(j.hook_failure->mu);
            h = j.hook_failure->first;
          }
          if (h) raise_hook_error(*h);
          throw;
        }
        return outcome_dict(*j.outcome);
      });
}
