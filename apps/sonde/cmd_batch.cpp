// sonde batch (design §6): a JSONL dataset through generation, results to R.jsonl and, with
// --hooks, activations to an HDF5 file committed in step with it. Checkpoints every K prompts or
// T seconds; --resume continues after the last checkpoint; SIGINT stops at the engine's next
// step, checkpoints every prompt finished so far and exits 130 with a resumable run.
#include "app_common.h"
#include "batch_progress.h"
#include "commands.h"
#include "run_flags.h"

#include <sonde/dataset.h>
#include <sonde/error.h>
#include <sonde/run.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <csignal>
#include <filesystem>
#include <optional>

namespace sonde::cli {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signal{0};

extern "C" void on_sigint(int sig) {
  g_signal.store(sig);
  g_interrupted.store(true);
}

// Every signal that ends a run (Ctrl-C, kill, a closed terminal) only raises a flag: the run
// stops at the engine's next step, checkpoints what has finished and stops resumable.
void catch_sigint() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

struct BatchOptions {
  CommonOptions common;
  CaptureSettings capture;
  EditFlags edits;
  SaeFlags sae;
  std::string input, output, acts, stats, features;
  std::int64_t batch_size = 8, checkpoint_every = 64;
  double checkpoint_seconds = 60;
  bool resume = false, overwrite = false, durable = false, skip_bad = false;
  std::uint64_t seed = 0;
  GenerationSettings defaults;  // generation options given on the command line
};

// Where the run writes and whether it may replace or continue what is there: the same for the
// check before the model loads and for the run itself.
void set_outputs(const BatchOptions& o, RunOptions& ro) {
  if (!o.acts.empty()) ro.sinks.push_back(SinkSpec{"hdf5", o.acts, o.overwrite, nullptr});
  if (!o.stats.empty()) ro.sinks.push_back(SinkSpec{"stats", o.stats, o.overwrite, nullptr});
  if (!o.features.empty()) ro.sinks.push_back(SinkSpec{"features", o.features, o.overwrite, nullptr});
  ro.results_path = o.output;
  ro.resume = o.resume;
  ro.overwrite = o.overwrite;
}

void check_outputs(const BatchOptions& o) {
  // core's policy (run.h, check_outputs), its settings named by our flags
  RunOptions ro;
  set_outputs(o, ro);
  as_flags({{"resume", "--resume"}, {"output", "--output"}, {"hdf5", "--acts"}, {"stats", "--stats"}, {"features", "--feature-stats"}},
           [&] { sonde::check_outputs(ro); });
  if (!o.acts.empty() && std::filesystem::absolute(o.acts) == std::filesystem::absolute(o.output))
    bad_input("--acts and --output are the same file {}", o.output);
  // An output that cannot be created is refused before the model loads and before anything is
  // written (the activation file is opened first, so a bad --output found later would leave it).
  for (const auto& [flag, path] : {std::pair{"--output", o.output}, std::pair{"--acts", o.acts}, std::pair{"--stats", o.stats},
                                    std::pair{"--feature-stats", o.features}}) {
    if (path.empty()) continue;
    const auto parent = std::filesystem::absolute(path).parent_path();
    std::error_code ec;
    if (!std::filesystem::is_directory(parent, ec))
      bad_input("{}: cannot write {}: {} is not a directory", flag, path, parent.string());
    if (::access(parent.c_str(), W_OK | X_OK) != 0)
      bad_input("{}: cannot write {}: directory {} is not writable ({})", flag, path, parent.string(), std::strerror(errno));
  }
}

int run_batch(BatchOptions o) {
  if (o.common.tensor_parallel == 0) o.common.tensor_parallel = 1;  // model copies split the prompts
  auto session = open_session(o.common);
  attach_saes(*session, o.sae);
  ProcessGroup* job = current_job();
  const bool parallel = job && job->size() > 1;  // the parts layout: --acts is a directory
  const bool shows = !job || job->rank() == 0;  // one progress display for the whole job
  Dataset data;
  try {
    data = read_dataset(o.input, o.skip_bad);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::BadInput || o.skip_bad) throw;
    throw Error(e.kind(), fmt::format("{} (--skip-bad-lines skips bad lines)", e.what()));
  }
  for (auto& r : data.requests) r.where = o.input + " " + r.where;
  if (o.edits.file.empty() && o.edits.steer.empty()) as_flag("--hooks", [&] { make_capture_spec(*session, o.capture); });

  RunOptions ro;
  ro.command = "batch";
  ro.defaults = o.defaults;
  ro.seed = o.seed;
  ro.batch_size = o.batch_size;
  ro.skip_bad = o.skip_bad;
  ro.capture = o.capture;
  ro.edits = edit_specs(o.edits);
  set_outputs(o, ro);
  ro.dataset_path = o.input;
  ro.durable = o.durable;
  ro.checkpoint_every = o.checkpoint_every;
  ro.checkpoint_seconds = o.checkpoint_seconds;
  ro.cancel = &g_interrupted;
  ro.keep_results = false;

  const auto begun = std::chrono::steady_clock::now();
  std::optional<BatchProgress> progress;
  const auto note = [&](const std::string& line) {
    if (shows) (progress ? *progress : BatchProgress(0, 0)).note(line);
  };
  for (const auto& why : data.skipped) note(fmt::format("skipped {} {}", o.input, why));
  ro.on_note = note;
  RunTotals job_totals;  // several copies: the whole job's, as rank 0 last saw them
  ro.on_progress = [&](const RunProgress& p) {
    if (!shows) return;
    if (!progress) progress.emplace(p.total, p.committed, begun);
    if (p.totals.prompts > 0) progress->update(p.totals);
    job_totals = p.totals;
  };
  catch_sigint();
  const RunResult res = [&] {
    try {
      RunResult r;  // core names the setting (a sink by its name); the command line its flag
      as_flags({{"hdf5", "--acts"}, {"stats", "--stats"}, {"features", "--feature-stats"}}, [&] { r = run(*session, data.requests, ro); });
      return r;
    } catch (const Error& e) {
      // A failure while writing (full disk, file-size limit, I/O error) leaves the run at its last
      // checkpoint: say how to go on. Bad input is refused before anything is written.
      if (e.kind() == ErrorKind::BadInput || !std::filesystem::exists(o.output)) throw;
      throw Error(e.kind(), std::string(e.what()) + "; the run stopped at its last checkpoint: fix the cause, then "
                                                    "continue with --resume (same options)");
    }
  }();
  if (res.cancelled) {
    const auto committed = res.committed_before + res.totals.prompts;
    if (parallel)
      note(fmt::format("interrupted: every model copy stopped at a checkpoint (rank 0: {} of its prompts committed); "
                       "continue with --resume and the same mpiexec -n",
                       committed));
    else
      note(fmt::format("interrupted: {} of {} prompts committed; continue with --resume", committed,
                       static_cast<std::int64_t>(data.requests.size() - res.skipped.size())));
    return 128 + g_signal.load();  // 130 for Ctrl-C, as a shell reports a signal
  }
  if (!shows) return 0;
  if (!progress) progress.emplace(0, res.committed_before, begun);
  std::uintmax_t bytes = 0;
  std::string acts = o.acts;
  if (!o.acts.empty() && parallel) {  // a directory of rank files joined by run.h5
    for (const auto& e : std::filesystem::directory_iterator(o.acts))
      if (e.path().filename().string().rfind("rank-", 0) == 0) bytes += e.file_size();
    acts = (std::filesystem::path(o.acts) / "run.h5").string();
  } else if (!o.acts.empty()) {
    bytes = std::filesystem::file_size(o.acts);
  }
  progress->summary(parallel ? job_totals : res.totals, bytes, acts);
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
      ("acts", po::value(&o.acts),
       "HDF5 file for the activations selected with --hooks (under mpiexec with several model copies: a "
       "directory of rank-<r>.h5 files and run.h5, which joins them)")
      ("stats", po::value(&o.stats), "running statistics of the --hooks rows (HDF5; resumable with --resume)")
      ("feature-stats", po::value(&o.features),
       "per-feature dashboard statistics of the --hooks SAE features (*.hook_sae_acts_post): frequency, mean, max, "
       "histogram, top contexts (HDF5; resumable; docs/sae.md)")
      ("batch-size", po::value(&o.batch_size)->default_value(8), "sequences decoded at once (the engine's slots, docs/engine.md)")
      ("checkpoint-every", po::value(&o.checkpoint_every)->default_value(64), "commit every K prompts")
      ("checkpoint-seconds", po::value(&o.checkpoint_seconds)->default_value(60), "commit at least every T seconds")
      ("resume", po::bool_switch(&o.resume), "continue the run in --output/--acts after its last checkpoint")
      ("overwrite", po::bool_switch(&o.overwrite), "replace existing --output/--acts files")
      ("durable", po::bool_switch(&o.durable), "fsync both files at every checkpoint")
      ("skip-bad-lines", po::bool_switch(&o.skip_bad), "report malformed input lines and continue")
      ("seed", po::value(&o.seed)->default_value(0), "request i without a \"seed\" uses seed + i");
  po::options_description defaults("generation defaults (for lines that do not set them)");
  add_generation_options(defaults, /*all=*/false);
  desc.add(defaults);
  add_capture_options(desc, o.capture);
  add_edit_options(desc, o.edits);
  add_sae_options(desc, o.sae, &o.capture);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde batch --model DIR --input F.jsonl --output R.jsonl [--hooks SEL --acts F.h5] [--resume]",
                     desc, vm))
    return 0;
  if (vm.count("acts") && !vm.count("hooks")) bad_input("--acts needs --hooks");
  if (vm.count("hooks") && !vm.count("acts") && !vm.count("stats") && !vm.count("feature-stats"))
    bad_input("--hooks needs --acts, --stats or --feature-stats");
  if (vm.count("stats") && !vm.count("hooks")) bad_input("--stats needs --hooks");
  if (vm.count("feature-stats") && !vm.count("hooks")) bad_input("--feature-stats needs --hooks (an SAE's hook_sae_acts_post)");
  if (o.batch_size < 1) bad_input("--batch-size must be at least 1, got {}", o.batch_size);
  if (o.checkpoint_every < 1) bad_input("--checkpoint-every must be at least 1, got {}", o.checkpoint_every);
  if (!(o.checkpoint_seconds > 0)) bad_input("--checkpoint-seconds must be positive, got {}", o.checkpoint_seconds);
  check_capture_flags(o.capture, vm);
  o.defaults = generation_settings(vm);
  if (!std::filesystem::exists(o.input)) bad_input("--input: {} does not exist", o.input);
  check_outputs(o);
  return run_batch(o);
}

}  // namespace sonde::cli
