// Data-parallel runs (run.h, RunOptions::job): which requests a model copy runs, where its parts
// go, how the ranks agree before and after, and how rank 0 joins the parts into the files one
// process would have written.
//
// Every rank makes the same collective calls in the same order: the checks before the run are
// agreed (an error found by any rank is raised by every rank), and the end is agreed (a copy
// that was cancelled makes the whole job report cancelled, resumable). An exception in between
// leaves the other ranks waiting in their next collective: whoever runs the job ends it then
// (ProcessGroup::abort; the CLI does).
#include <sonde/error.h>
#include <sonde/model_dir.h>
#include <sonde/output_lock.h>
#include <sonde/registry.h>

#include "run_internal.h"

#include <filesystem>
#include <fstream>
#include <optional>

namespace sonde::run_detail {
namespace fs = std::filesystem;

JobLayout job_layout(const RunOptions& o) {
  JobLayout j;
  if (!o.job) return j;
  j.rank = o.job->rank();
  j.world = o.job->size();
  j.tensor_parallel = std::max(1, o.tensor_parallel);
  if (j.world % j.tensor_parallel != 0)
    bad_input("tensor parallel: {} ranks per model copy do not divide the job's {} ranks", j.tensor_parallel, j.world);
  return j;
}

namespace {

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }
std::string string_of(const std::vector<std::byte>& b) { return {reinterpret_cast<const char*>(b.data()), b.size()}; }

// An error one rank found, as exchanged: its kind ('B' bad input, 'R' runtime) and message; "" is none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return (e.kind() == ErrorKind::BadInput ? "B" : "R") + std::string(e.what());
  }
  return {};
}

// Raises, on every rank, the lowest rank's error (from error_of). Checks that can fail on one
// rank only (a file it cannot open) go through here, so no rank is left waiting for another.
void agree_error(ProcessGroup& g, const std::string& mine) {
  for (const auto& e : g.allgather(bytes_of(mine)))
    if (!e.empty()) {
      const std::string what = string_of(e).substr(1);
      if (static_cast<char>(e.front()) == 'B') bad_input("{}", what);
      runtime_error("{}", what);
    }
}

// Every rank must run the same program with the same options on the same input: a digest of the
// run's configuration and of this executable, exchanged at the start.
void check_same_run(ProcessGroup& g, const std::string& config) {
  const std::string mine = sha256_hex(config.data(), config.size()) + " " + sha256_file("/proc/self/exe");
  const auto all = g.allgather(bytes_of(mine));
  const std::string first = string_of(all[0]);
  std::string why;
  for (std::size_t r = 1; r < all.size() && why.empty(); ++r) {
    const std::string other = string_of(all[r]);
    if (other == first) continue;
    const bool same_config = other.substr(0, 64) == first.substr(0, 64);
    why = fmt::format("rank {} {} rank 0's (run configuration sha256 {} vs {}, executable sha256 {} vs {}); every rank "
                      "needs the same sonde binary, model, options and input",
                      r, same_config ? "runs a different sonde executable than" : "has other options or input than",
                      other.substr(0, 12), first.substr(0, 12), other.substr(65, 12), first.substr(65, 12));
  }
  agree_error(g, why.empty() ? "" : "B" + why);
}

std::string part_name(int replica, const char* ext) { return fmt::format("rank-{}{}", replica, ext); }
fs::path results_parts_dir(const std::string& results) { return results + ".parts"; }

// Rank 0's checks of the places the parts go: a sink path must be a directory (or not exist),
// and a resume must find the parts of a job with as many model copies as this one.
void check_part_places(const RunOptions& o, int replicas) {
  for (const auto& s : o.sinks)
    if (!(s.sink ? s.sink : PluginRegistry::instance().sink(s.name))->joins())
      bad_input("{}: the {} sink cannot join the parts of a data-parallel run ({} model copies); run it in one "
                "process, or without this output",
                s.path, s.name, replicas);
  for (const auto& s : o.sinks)
    if (!s.path.empty() && fs::exists(s.path) && !fs::is_directory(s.path))
      bad_input("{} is a file, but a data-parallel run ({} model copies) writes a directory of rank-<r>.h5 files "
                "there: give a directory",
                s.path, replicas);
  const fs::path dir = results_parts_dir(o.results_path);
  if (!o.resume || !fs::is_directory(dir)) return;
  int found = 0, beyond = -1;
  for (const auto& e : fs::directory_iterator(dir)) {
    const auto name = e.path().filename().string();
    int r = -1, end = 0;  // exactly rank-<r>.jsonl: not its .lock, nor the .progress beside it
    if (std::sscanf(name.c_str(), "rank-%d.jsonl%n", &r, &end) != 1 || end != static_cast<int>(name.size())) continue;
    if (r < replicas) ++found;
    else beyond = std::max(beyond, r);
  }
  if (beyond >= 0 || (found > 0 && found < replicas))
    bad_input("resume: {} holds the parts of a run with {} data-parallel model copies, this job has {}; resume with "
              "the same number of ranks and the same tensor-parallel size",
              dir.string(), beyond >= 0 ? beyond + 1 : found, replicas);
}

// The parts' results, one line per request, joined in input order: request i is line i / R of
// part i % R (the assignment rule), written beside `path` and renamed into place.
void join_results(const std::string& path, int replicas, std::int64_t total) {
  OutputLock lock(path);
  std::vector<std::ifstream> parts;
  for (int r = 0; r < replicas; ++r) {
    parts.emplace_back(results_parts_dir(path) / part_name(r, ".jsonl"), std::ios::binary);
    if (!parts.back()) runtime_error("data-parallel join: cannot read the results of model copy {}", r);
  }
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    std::string line;
    for (std::int64_t i = 0; i < total; ++i) {
      const auto r = static_cast<std::size_t>(i % replicas);
      if (!std::getline(parts[r], line))
        runtime_error("data-parallel join: model copy {}'s results end before request {} of {}", r, i, total);
      out << line << '\n';
    }
    out.flush();
    if (!out) runtime_error("data-parallel join: writing {} failed", partial);
  }
  std::error_code ec;
  fs::rename(partial, path, ec);
  if (ec) runtime_error("data-parallel join: cannot rename {} to {}: {}", partial, path, ec.message());
}

// One display for the whole job: each copy's writer leaves its progress in a small file beside
// its results part (replaced whole, so a reader never sees half of it), and rank 0 adds them up
// whenever its own progress moves. No collective is needed mid-run, so no copy waits for another.
class JobProgress {
 public:
  JobProgress(const RunOptions& o, const JobLayout& job, std::int64_t total)
      : dir_(results_parts_dir(o.results_path)), job_(job), total_(total), report_(o.on_progress) {}

  std::function<void(const RunProgress&)> callback() {
    if (!report_ || !job_.writes()) return {};
    return [this](const RunProgress& mine) {
      write_mine(mine);
      report_(job_.rank == 0 ? sum() : mine);
    };
  }
  // After every copy has finished (or stopped): the job's final count, on rank 0.
  void final_report() const {
    if (report_ && job_.rank == 0) report_(sum());
  }
  // Rank 0, before the first collective: a file left by an earlier run into the same place
  // (--overwrite, a resume) would add that run's counts to this one's.
  void clear() const {
    std::error_code ec;
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.ends_with(".progress") || name.ends_with(".progress.tmp")) stale.push_back(it->path());
    }
    for (const auto& f : stale) fs::remove(f, ec);
  }
  // Each copy's writer, before the collective that follows: what earlier runs committed, so
  // rank 0's first sum already counts every copy's resumed prompts.
  void start(std::int64_t committed) const {
    if (job_.writes()) write_mine(RunProgress{0, committed, {}});
  }

 private:
  fs::path file(int r) const { return dir_ / part_name(r, ".progress"); }
  void write_mine(const RunProgress& p) const {
    const auto tmp = file(job_.replica()).string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << p.committed << ' ' << p.totals.prompts << ' ' << p.totals.prompt_tokens << ' ' << p.totals.completion_tokens
          << ' ' << p.totals.rows << '\n';
    }
    std::error_code ec;
    fs::rename(tmp, file(job_.replica()), ec);
  }
  RunProgress sum() const {
    RunProgress all{total_, 0, {}};
    for (int r = 0; r < job_.replicas(); ++r) {
      std::ifstream in(file(r));
      std::int64_t committed = 0;
      RunTotals t;
      if (in >> committed >> t.prompts >> t.prompt_tokens >> t.completion_tokens >> t.rows) {
        all.committed += committed;
        all.totals.prompts += t.prompts;
        all.totals.prompt_tokens += t.prompt_tokens;
        all.totals.completion_tokens += t.completion_tokens;
        all.totals.rows += t.rows;
      }
    }
    return all;
  }
  fs::path dir_;
  JobLayout job_;
  std::int64_t total_;
  std::function<void(const RunProgress&)> report_;
};

}  // namespace

void run_data_parallel(RunModel& s, const std::vector<PreparedRequest>& prepared, const CaptureSpec& spec,
                       const RunOptions& o, const JobLayout& job, bool diffusion, RunResult& res) {
  ProcessGroup& world = *o.job;
  const int replicas = job.replicas(), replica = job.replica();
  if (o.results_path.empty())
    bad_input("a data-parallel run ({} model copies of {} ranks) needs a results file for the ranks' parts", replicas,
              job.tensor_parallel);
  nlohmann::json config = run_config(s, o, prepared);
  config["data_parallel"] = replicas;
  const std::string config_json = config.dump();  // what every rank must agree on
  check_same_run(world, config_json);
  JobProgress progress(o, job, static_cast<std::int64_t>(prepared.size()));
  agree_error(world, job.rank == 0 ? error_of([&] {
    check_part_places(o, replicas);
    progress.clear();
  })
                                   : "");

  // This copy's requests: index i goes to copy i % R (equal counts within one; with shuffled
  // data the token counts even out too, and the rule needs no communication to resume).
  std::vector<PreparedRequest> share;
  for (const auto& p : prepared)
    if (p.index % replicas == replica) share.push_back(p);

  RunOptions mine = o;
  mine.on_progress = progress.callback();
  mine.resume_complete = true;  // a copy that finished before the others stopped keeps its part
  if (job.writes()) {
    mine.results_path = (results_parts_dir(o.results_path) / part_name(replica, ".jsonl")).string();
    for (auto& sink : mine.sinks) sink.path = (fs::path(sink.path) / part_name(replica, ".h5")).string();
  } else {  // runs its share in step with its copy's writer, and writes nothing
    mine.results_path.clear();
    mine.sinks.clear();
  }
  RunMetadata meta = run_metadata(s, config, o.capture.storage);
  meta.ints["rank"] = replica;
  meta.ints["world_size"] = replicas;

  std::optional<Outputs> out;
  agree_error(world, error_of([&] {
                if (job.writes()) {
                  std::error_code ec;
                  fs::create_directories(results_parts_dir(o.results_path), ec);
                  for (const auto& sink : o.sinks) fs::create_directories(sink.path, ec);
                }
                out.emplace(mine, spec, meta, diffusion);
                progress.start(out->mark().prompts);
              }));
  auto copy = world.split(replica, job.rank);  // the ranks of this model copy, writer first
  CommitMark mark = out->mark();
  copy->broadcast(std::as_writable_bytes(std::span(&mark.prompts, 1)), 0);
  out->follow(mark);

  // The job's committed prompts, every copy's writer's mark summed: the one count a resume names
  // (each copy's own generate_all would note only its share).
  std::int64_t job_committed = 0;
  for (const auto& e : world.allgather(bytes_of(std::to_string(job.writes() ? mark.prompts : 0))))
    job_committed += std::stoll(string_of(e));
  if (job_committed > 0 && job.rank == 0 && o.on_note) o.on_note(fmt::format("resuming after {} committed prompts", job_committed));
  mine.on_note = [&o](const std::string& m) {
    if (m.rfind("resuming after", 0) != 0 && o.on_note) o.on_note(m);
  };

  const auto agree = [&](bool cancel) {
    if (copy->size() == 1) return cancel;
    std::uint8_t flag = cancel ? 1 : 0;
    copy->broadcast(std::as_writable_bytes(std::span(&flag, 1)), 0);
    return flag != 0;
  };
  generate_all(s, share, spec, mine, *out, res, agree);
  out.reset();

  // Only a job whose every copy finished is joined; a cancelled one stays resumable.
  const std::string state = res.cancelled ? "cancelled" : "done";
  bool any_cancelled = false;
  for (const auto& st : world.allgather(bytes_of(state))) any_cancelled = any_cancelled || string_of(st) != "done";
  progress.final_report();
  if (any_cancelled) {
    res.cancelled = true;
    return;
  }
  std::string join_error;
  if (job.rank == 0) {
    join_error = error_of([&] {
      join_results(o.results_path, replicas, static_cast<std::int64_t>(prepared.size()));
      for (const auto& want : o.sinks) {
        std::vector<std::string> parts;
        for (int r = 0; r < replicas; ++r) parts.push_back((fs::path(want.path) / part_name(r, ".h5")).string());
        const auto path = (fs::path(want.path) / "run.h5").string();
        OutputLock lock(path);
        auto sink = want.sink ? want.sink : PluginRegistry::instance().sink(want.name);
        sink->join(parts, path, meta);  // rank 0's: copy 0's, world_size R
      }
    });
  }
  agree_error(world, join_error);
}

}  // namespace sonde::run_detail
