// sonde <command> [options]. Errors become one line on stderr and exit code 2 (bad usage or bad
// input) or 1 (runtime failure), per design §6.
#include "app_common.h"
#include "commands.h"

#include <sonde/error.h>

#include <boost/program_options/errors.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

namespace {

struct CommandEntry {
  const char* name;
  int (*run)(const sonde::cli::Args&);
  const char* summary;
};

const CommandEntry kCommands[] = {
    {"demo", sonde::cli::cmd_demo, "make a small random model if needed, capture a few hooks to HDF5, show the result"},
    {"make-model", sonde::cli::cmd_make_model, "write a random-weight checkpoint in Hugging Face layout"},
    {"inspect", sonde::cli::cmd_inspect, "architecture, parameters, dtypes, memory estimate, tokenizer"},
    {"hooks", sonde::cli::cmd_hooks, "list every hook point of a model with its shape"},
    {"forward", sonde::cli::cmd_forward, "one forward pass; logits and selected hooks to HDF5"},
    {"generate", sonde::cli::cmd_generate, "autoregressive (Qwen2) or masked-diffusion (Dream) generation"},
    {"batch", sonde::cli::cmd_batch, "a JSONL dataset through generation; results and activations, resumable"},
    {"lens", sonde::cli::cmd_lens, "logit lens: every layer's residual stream through the final norm and head"},
    {"score", sonde::cli::cmd_score, "log-likelihood of completions (exact for Qwen2, a Monte Carlo bound for Dream)"},
    {"serve", sonde::cli::cmd_serve, "an OpenAI-compatible HTTP server; activations and steering per request"},
    {"report", sonde::cli::cmd_report, "one self-contained HTML page showing a dump, lens or statistics file (docs/report.md)"},
    {"tokenize", sonde::cli::cmd_tokenize, "text to token ids (or back with --decode)"},
    {"bench", sonde::cli::cmd_bench, "prefill / decode tokens/s, one diffusion step, peak RSS (--json)"},
    {"plugins", sonde::cli::cmd_plugins, "list the plugins found and the files rejected"},
};

void usage(std::ostream& os) {
  os << "sonde " SONDE_VERSION ": run Qwen2.5 and Dream checkpoints and capture their activations to HDF5\n\n"
     << "usage: sonde <command> [options]   (sonde <command> --help for its options)\n\ncommands:\n";
  for (const auto& c : kCommands) os << "  " << c.name << std::string(12 - std::strlen(c.name), ' ') << c.summary << "\n";
}

}  // namespace

// One rank failed: the job ends as a whole. An error every rank meets (bad options) is printed
// once, by rank 0, which ends the job; another rank waits a moment for that before it prints
// its own error (one only it met) and ends the job itself.
[[noreturn]] static void end_job(sonde::ProcessGroup& job, const std::string& cmd, const std::string& what, int code) {
  if (job.rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
  // One write(2) of the whole line: Open MPI's abort banner, written by another process to the
  // same terminal, cannot land in the middle of it.
  const std::string line = fmt::format("sonde {}: error: {}{}\n", cmd, job.rank() ? fmt::format("rank {}: ", job.rank()) : "", what);
  std::cerr.flush();
  for (std::size_t at = 0; at < line.size();) {
    const auto n = ::write(2, line.data() + at, line.size() - at);
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  job.abort(code);
  std::_Exit(code);  // abort() does not return; GCC does not carry [[noreturn]] through a virtual call
}

int main(int argc, char** argv) {
  // Past a file-size limit (ulimit -f) a write then fails with EFBIG, which the writer reports
  // naming the file, instead of the signal killing the program without a word.
  std::signal(SIGXFSZ, SIG_IGN);
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    usage(std::cout);
    return 0;
  }
  if (cmd == "--version") {
    std::cout << "sonde " SONDE_VERSION "\n";
    return 0;
  }
  for (const auto& c : kCommands) {
    if (cmd != c.name) continue;
    try {
      return c.run(sonde::cli::Args(argv + 2, argv + argc));
    } catch (const sonde::Error& e) {
      if (auto* job = sonde::cli::current_job(); job && job->size() > 1) end_job(*job, cmd, e.what(), e.exit_code());
      // Refused before the job formed (options, outputs), on every rank: rank 0's line ends the job
      // (mpiexec stops the others); another rank prints only an error of its own, after a moment.
      if (const auto [n, rank] = sonde::cli::launcher_job(); n > 1 && rank != 0) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        std::cerr << "sonde " << cmd << ": error: rank " << rank << ": " << e.what() << "\n";
        return e.exit_code();
      }
      std::cerr << "sonde " << cmd << ": error: " << e.what() << "\n";
      return e.exit_code();
    } catch (const boost::program_options::error& e) {
      std::cerr << "sonde " << cmd << ": error: " << e.what() << " (see sonde " << cmd << " --help)\n";
      return 2;
    } catch (const std::exception& e) {
      if (auto* job = sonde::cli::current_job(); job && job->size() > 1) end_job(*job, cmd, e.what(), 1);
      std::cerr << "sonde " << cmd << ": error: " << e.what() << "\n";
      return 1;
    }
  }
  std::cerr << "sonde: unknown command '" << cmd << "'\n\n";
  usage(std::cerr);
  return 2;
}
