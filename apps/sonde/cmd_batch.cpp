// sonde batch (design §6): a JSONL dataset through generation, results to R.jsonl and, with
// --hooks, activations to an HDF5 file committed in step with it. Checkpoints every K prompts or
// T seconds; --resume continues after the last checkpoint; SIGINT finishes the micro-batch,
// checkpoints and exits 130 with a resumable run.
#include "app_common.h"
#include "batch_gen.h"
#include "batch_input.h"
#include "batch_progress.h"
#include "batch_results.h"
#include "capture_setup.h"
#include "commands.h"
#include "run_metadata.h"

#include <sonde/error.h>
#include <sonde/model_dir.h>
#include <sonde/registry.h>
#include <sonde/session_decode.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <csignal>
#include <iostream>

namespace sonde::cli {
namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) { g_interrupted.store(true); }

// SIGINT only raises a flag: the loop finishes its micro-batch and checkpoints.
void catch_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
}

struct BatchOptions {
  CommonOptions common;
  CaptureOptions capture;
  std::string input, output, acts;
  std::int64_t batch_size = 8, checkpoint_every = 64;
  double checkpoint_seconds = 60;
  bool resume = false, overwrite = false, durable = false, skip_bad = false;
  std::uint64_t seed = 0;
  nlohmann::json defaults = nlohmann::json::object();  // generation options given on the command line
};

void check_outputs(const BatchOptions& o) {
  if (o.resume && o.overwrite) bad_input("--resume and --overwrite exclude each other");
  for (const auto& [flag, path] : {std::pair{"--output", o.output}, std::pair{"--acts", o.acts}})
    if (!path.empty() && std::filesystem::exists(path) && !o.resume && !o.overwrite)
      bad_input("{}: {} exists (use --resume to continue that run or --overwrite to replace it)", flag, path);
  if (!o.acts.empty() && std::filesystem::absolute(o.acts) == std::filesystem::absolute(o.output))
    bad_input("--acts and --output are the same file {}", o.output);
  // An output that cannot be created is refused before the model loads and before anything is
  // written (the activation file is opened first, so a bad --output found later would leave it).
  for (const auto& [flag, path] : {std::pair{"--output", o.output}, std::pair{"--acts", o.acts}}) {
    if (path.empty()) continue;
    const auto parent = std::filesystem::absolute(path).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      bad_input("{}: cannot write {}: {} is not a directory", flag, path, parent.string());
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      bad_input("{}: cannot write {}: directory {} is not writable ({})", flag, path, parent.string(), std::strerror(errno));
  }
}

// Everything that decides the outputs: a resumed run must match it exactly.
nlohmann::json run_config(const BatchOptions& o, Session& s) {
  return {{"command", "batch"},
          {"model_config_sha256", sha256_hex(s.config().raw_json.data(), s.config().raw_json.size())},
          {"input_sha256", sha256_file(o.input)},
          {"batch_size", o.batch_size},
          {"seed", o.seed},
          {"defaults", o.defaults},
          {"capture", capture_config(o.capture)},
          {"backend", s.backend().info().name}};
}

std::vector<PreparedRequest> prepare_all(BatchInput& in, const BatchOptions& o, Session& s,
                                         const std::optional<Tokenizer>& tok, BatchProgress& progress) {
  std::vector<PreparedRequest> out;
  for (const auto& r : in.requests) {
    try {
      out.push_back(prepare_request(r, static_cast<std::int64_t>(out.size()), o.defaults, o.seed, s, tok));
    } catch (const Error& e) {
      if (!o.skip_bad || e.exit_code() != 2) throw Error(e.kind(), fmt::format("{}: {}", o.input, e.what()));
      in.skipped.push_back(e.what());
    }
  }
  for (const auto& why : in.skipped) progress.note(fmt::format("skipped {} {}", o.input, why));
  if (out.empty()) bad_input("--input: {} holds no usable requests", o.input);
  return out;
}

// Consecutive requests with equal options, at most batch_size: a pure function of the start, so
// a resumed run forms the same micro-batches as an uninterrupted one.
std::vector<const PreparedRequest*> next_batch(const std::vector<PreparedRequest>& all, std::size_t from, std::int64_t size) {
  std::vector<const PreparedRequest*> b;
  for (std::size_t i = from; i < all.size() && static_cast<std::int64_t>(b.size()) < size; ++i) {
    if (!b.empty() && all[i].key != b.front()->key) break;
    b.push_back(&all[i]);
  }
  return b;
}

nlohmann::json result_line(const PreparedRequest& p, const RequestResult& r) {
  return {{"id", p.request->id},
          {"completion", r.text},
          {"completion_ids", r.completion},
          {"prompt_tokens", p.ids.size()},
          {"completion_tokens", r.completion.size()},
          {"finish_reason", r.finish_reason}};
}

PromptRecord prompt_record(const PreparedRequest& p, const RequestResult& r) {
  PromptRecord rec;
  rec.prompt_idx = p.prompt_idx;
  rec.id = p.request->id;
  rec.text = p.text;
  rec.completion = r.text;
  rec.finish_reason = r.finish_reason;
  rec.token_ids = p.ids;
  rec.token_ids.insert(rec.token_ids.end(), r.completion.begin(), r.completion.end());
  rec.seed = p.seed;
  return rec;
}

struct Run {
  const BatchOptions& o;
  Session& session;
  std::shared_ptr<Sink> sink;
  CaptureSpec spec;
  CommitMark mark;  // what is committed on disk
  std::unique_ptr<ResultsFile> results;
  BatchTotals totals;

  void open_outputs() {
    const bool fresh_acts = !o.acts.empty() && !(o.resume && std::filesystem::exists(o.acts));
    if (!o.acts.empty()) {
      SinkOptions so;
      so.path = o.acts;
      so.storage = storage_dtype(o.capture.storage);
      so.compress = o.capture.compress;
      so.overwrite = o.overwrite;
      so.streaming = true;
      so.resume = !fresh_acts;
      so.durable = o.durable;
      so.diffusion = session.info().decoding == DecodingKind::MaskedDiffusion;
      sink = PluginRegistry::instance().sink("hdf5");
      mark = sink->open(so, run_metadata(session, run_config(o, session).dump(), o.capture.storage), spec.hooks);
    } else if (o.resume && std::filesystem::exists(o.output)) {
      const auto m = complete_lines(o.output);  // without an activation file the results are the mark
      mark = CommitMark{m.lines, 0, m.bytes};
    }
    const bool keep = o.resume && std::filesystem::exists(o.output);
    if (o.resume && !keep && mark.prompts > 0)
      runtime_error("--resume: {} is missing but {} committed {} prompts", o.output, o.acts, mark.prompts);
    results = std::make_unique<ResultsFile>(o.output, keep, keep ? mark.results_bytes : 0, o.durable);
  }

  void checkpoint(std::int64_t prompts_done) {
    mark.prompts = prompts_done;
    mark.rows += totals.rows - rows_at_mark;
    rows_at_mark = totals.rows;
    mark.results_bytes = results->commit();
    if (sink) sink->checkpoint(mark);
  }
  std::int64_t rows_at_mark = 0;

  void emit(const std::vector<const PreparedRequest*>& batch, const std::vector<RequestResult>& res) {
    for (std::size_t r = 0; r < batch.size(); ++r) {
      if (sink) write_captured(*sink, spec, res[r].captured, prompt_record(*batch[r], res[r]));
      results->append(result_line(*batch[r], res[r]).dump());
      totals.prompts += 1;
      totals.prompt_tokens += static_cast<std::int64_t>(batch[r]->ids.size());
      totals.completion_tokens += static_cast<std::int64_t>(res[r].completion.size());
      totals.rows += static_cast<std::int64_t>(res[r].captured.rows.size());
    }
  }
};

int run_batch(BatchOptions& o) {
  auto session = open_session(o.common);
  std::optional<Tokenizer> tok;
  if (Tokenizer::available(session->model_dir())) tok.emplace(Tokenizer::load(session->model_dir()));
  BatchInput input = read_batch_input(o.input, o.skip_bad);
  Run run{o, *session, nullptr, make_capture_spec(*session, o.capture), {}, nullptr, {}};
  BatchProgress progress(0, 0);
  auto all = prepare_all(input, o, *session, tok, progress);
  run.open_outputs();
  const auto start = static_cast<std::size_t>(run.mark.prompts);
  if (start > all.size())
    runtime_error("--resume: the run committed {} prompts but {} holds {}", start, o.input, all.size());
  progress = BatchProgress(static_cast<std::int64_t>(all.size()), run.mark.prompts);
  if (start > 0) progress.note(fmt::format("resuming after {} committed prompts", start));

  catch_sigint();
  SessionDecodeForward fwd(*session);
  auto last_ckpt = std::chrono::steady_clock::now();
  std::int64_t since_ckpt = 0;
  std::size_t next = start;
  while (next < all.size()) {
    const auto batch = next_batch(all, next, o.batch_size);
    run.emit(batch, run_micro_batch(*session, fwd, tok, batch, run.spec));
    next += batch.size();
    since_ckpt += static_cast<std::int64_t>(batch.size());
    const bool due = since_ckpt >= o.checkpoint_every ||
                     std::chrono::steady_clock::now() - last_ckpt >= std::chrono::duration<double>(o.checkpoint_seconds);
    if (due || g_interrupted.load()) {
      run.checkpoint(static_cast<std::int64_t>(next));
      since_ckpt = 0;
      last_ckpt = std::chrono::steady_clock::now();
    }
    progress.update(run.totals);
    if (g_interrupted.load() && next < all.size()) {
      progress.note(fmt::format("interrupted: {} of {} prompts committed; continue with --resume", next, all.size()));
      if (run.sink) run.sink->close();
      return 130;
    }
  }
  run.checkpoint(static_cast<std::int64_t>(next));
  if (run.sink) run.sink->close();
  const auto bytes = o.acts.empty() ? 0 : std::filesystem::file_size(o.acts);
  progress.summary(run.totals, bytes, o.acts);
  return 0;
}

}  // namespace

int cmd_batch(const Args& args) {
  BatchOptions o;
  po::options_description desc("batch options");
  add_common_options(desc, o.common);
  desc.add_options()
      ("input", po::value(&o.input)->required(), "JSONL: {\"id\", \"prompt\" | \"messages\" | \"ids\", options...} per line")
      ("output", po::value(&o.output)->required(), "results JSONL: id, completion, token counts, finish_reason")
      ("acts", po::value(&o.acts), "HDF5 file for the activations selected with --hooks")
      ("batch-size", po::value(&o.batch_size)->default_value(8), "prompts per micro-batch")
      ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(64), "commit every K prompts")
      ("checkpoint-seconds", po::value(&o.checkpoint_seconds)->default_value(60), "commit at least every T seconds")
      ("resume", po::bool_switch(&o.resume), "continue the run in --output/--acts after its last checkpoint")
      ("overwrite", po::bool_switch(&o.overwrite), "replace existing --output/--acts files")
      ("durable", po::bool_switch(&o.durable), "fsync both files at every checkpoint")
      ("skip-bad-lines", po::bool_switch(&o.skip_bad), "report malformed input lines and continue")
      ("seed", po::value(&o.seed)->default_value(0), "request i without a \"seed\" uses seed + i")
      ("max-new-tokens", po::value<std::int64_t>(), "default for lines without max_new_tokens")
      ("temperature", po::value<double>(), "default temperature (0: greedy / argmax)")
      ("top-k", po::value<std::int64_t>(), "default top_k")
      ("top-p", po::value<double>(), "default top_p")
      ("steps", po::value<std::int64_t>(), "diffusion: default steps (else max_new_tokens)")
      ("alg", po::value<std::string>(), "diffusion: default alg (origin, maskgit_plus, topk_margin, entropy)");
  add_capture_options(desc, o.capture);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde batch --model DIR --input F.jsonl --output R.jsonl [--hooks SEL --acts F.h5] [--resume]",
                     desc, vm))
    return 0;
  if (vm.count("hooks") != vm.count("acts")) bad_input("--hooks and --acts go together: give both or neither");
  if (o.batch_size < 1) bad_input("--batch-size must be at least 1, got {}", o.batch_size);
  if (o.checkpoint_every < 1) bad_input("--checkpoint-every must be at least 1, got {}", o.checkpoint_every);
  if (!(o.checkpoint_seconds > 0)) bad_input("--checkpoint-seconds must be positive, got {}", o.checkpoint_seconds);
  check_capture_options(o.capture);
  // Command-line defaults, under the names the input lines use.
  for (auto [flag, key] : {std::pair{"max-new-tokens", "max_new_tokens"}, std::pair{"top-k", "top_k"}, std::pair{"steps", "steps"}})
    if (vm.count(flag)) o.defaults[key] = vm[flag].as<std::int64_t>();
  for (auto [flag, key] : {std::pair{"temperature", "temperature"}, std::pair{"top-p", "top_p"}})
    if (vm.count(flag)) o.defaults[key] = vm[flag].as<double>();
  if (vm.count("alg")) {
    parse_diffusion_alg(vm["alg"].as<std::string>());
    o.defaults["alg"] = vm["alg"].as<std::string>();
  }
  if (!std::filesystem::exists(o.input)) bad_input("--input: {} does not exist", o.input);
  check_outputs(o);
  return run_batch(o);
}

}  // namespace sonde::cli
