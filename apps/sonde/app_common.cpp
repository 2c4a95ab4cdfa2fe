#include "app_common.h"

#include <cstdlib>

#include <sonde/did_you_mean.h>
#include <sonde/error.h>
#include <sonde/log.h>
#include <sonde/registry.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>

namespace sonde::cli {
namespace {
ProcessGroup* g_job = nullptr;
int g_tensor_parallel = 1;
}  // namespace

void add_common_options(po::options_description& desc, CommonOptions& o, bool with_model) {
  if (with_model)
    desc.add_options()("model", po::value(&o.model)->required(),
                       "model directory, or org/name in the local Hugging Face cache (never downloads)");
  desc.add_options()
      ("backend", po::value(&o.backend), "compute backend: reference, cpu-blas, ... (default: the fastest available)")
      ("threads", po::value(&o.threads)->default_value(0), "compute threads (0: all cores)")
      ("weights", po::value(&o.weights)->default_value("native"),
       "Linear weights: native (as stored) or q8 (int8 blocks, threaded backend; others ignore it)")
      ("compute", po::value(&o.compute)->default_value("f32"),
       "Linear compute precision: f32 (exact), bf16 (activations rounded to bf16, bf16 products summed in f32) or "
       "int8 (with --weights q8: activations quantised to int8 per block of 32, integer products); recorded in "
       "every output file")
      ("plugin-dir", po::value(&o.plugin_dir), "look for plugins here first")
      ("tensor-parallel", po::value(&o.tensor_parallel)->default_value(0),
       "--backend sharded under mpiexec: ranks per model copy (0: every rank for forward, generate and bench; 1 "
       "for batch, whose copies split the prompts)")
      ("shard-backend", po::value(&o.shard_backend)->default_value("threaded"),
       "--backend sharded: the backend each rank runs its share on")
      ("log-level", po::value(&o.log_level)->default_value("warn"), "trace, debug, info, warn, error, off")
      ("config", po::value(&o.config_file), "read options from this file (key = value lines)");
}

namespace {
// An unknown flag, with the closest of the command's own (the rule every front end suggests by:
// did_you_mean.h), so that `--positons` gets the name Python's capture and serve's body get.
[[noreturn]] void refuse_unknown_flag(const po::unknown_option& e, const po::options_description& all) {
  std::string name = e.get_option_name();
  name.erase(0, name.find_first_not_of('-'));
  std::vector<std::string> names;
  for (const auto& o : all.options()) names.push_back(o->long_name());
  std::string hint;
  for (const auto& c : closest_names(name, names, 2)) hint += (hint.empty() ? "; did you mean: --" : ", --") + c;
  throw po::error(std::string(e.what()) + hint);
}
}  // namespace

bool parse_options(const std::vector<std::string>& args, const std::string& usage,
                   const po::options_description& desc, po::variables_map& vm,
                   const po::positional_options_description* positional) {
  po::options_description all(desc);
  all.add_options()("help,h", "show this help");
  po::command_line_parser parser(args);
  parser.options(all);
  if (positional) parser.positional(*positional);
  try {
    po::store(parser.run(), vm);
  } catch (const po::unknown_option& e) {
    refuse_unknown_flag(e, all);
  }
  if (vm.count("help")) {
    std::cout << usage << "\n\n" << all << "\n";
    return false;
  }
  if (vm.count("config")) {
    const auto file = vm["config"].as<std::string>();
    std::ifstream in(file);
    if (!in) bad_input("--config: cannot read '{}'", file);
    try {
      po::store(po::parse_config_file(in, all), vm);
    } catch (const po::unknown_option& e) {
      refuse_unknown_flag(e, all);
    }
  }
  po::notify(vm);
  return true;
}

namespace {
// An error met while opening (a bad layout, a model that cannot be split so): every rank of the
// job meets it, and the job must end as a whole (main.cpp) with one line.
void close_job_on_error(const CommonOptions& o) {
  if (o.backend != "sharded") return;
  try {
    g_job = PluginRegistry::instance().backend("sharded")->process_group();
  } catch (...) {
  }
}
// Started by mpiexec as several processes without --backend sharded, each would run the whole job
// on its own (and the second would stop at the first's output lock). The first says so, once; the
// others leave without a word, so that the job prints one line.
void refuse_unshared_job(const CommonOptions& o) {
  const auto [size, rank] = launcher_job();
  if (size <= 1 || o.backend == "sharded") return;
  if (rank != 0) std::_Exit(2);
  bad_input("--backend: started by mpiexec as {} processes, but the backend is {}: each process would run the whole job "
            "alone; add --backend sharded to split the job between them (docs/scale-out.md)",
            size, o.backend.empty() ? "chosen per process" : "'" + o.backend + "'");
}
}  // namespace

std::unique_ptr<Session> open_session(const CommonOptions& o) {
  init_logging(o.log_level);
  refuse_unshared_job(o);
  if (o.threads < 0) bad_input("--threads: {} is negative", o.threads);
  if (o.weights != "native" && o.weights != "q8") bad_input("--weights: '{}' is not native or q8", o.weights);
  if (o.tensor_parallel < 0) bad_input("--tensor-parallel: {} is negative", o.tensor_parallel);
  std::unique_ptr<Session> s;
  try {
    s = Session::open(
        SessionOptions{o.model, o.backend, o.threads, o.plugin_dir, o.weights, o.shard_backend, o.tensor_parallel,
                       o.compute});
  } catch (const Error& e) {
    close_job_on_error(o);
    // Core names the setting ("compute: ..."); the command line names its flag, once.
    if (e.setting() == "compute") throw Error(e.kind(), fmt::format("--compute: {}", e.detail()));
    throw;
  } catch (...) {
    close_job_on_error(o);
    throw;
  }
  g_job = s->backend().process_group();
  g_tensor_parallel = s->backend().info().tensor_parallel;
  return s;
}

ProcessGroup* current_job() { return g_job; }

// The launcher's job size and this process's rank (Open MPI's, else MPICH's variables); {1, 0}
// outside mpiexec.
std::pair<int, int> launcher_job() {
  for (const auto& [size, rank] : {std::pair{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, std::pair{"PMI_SIZE", "PMI_RANK"}}) {
    const char* n = std::getenv(size);
    const char* r = std::getenv(rank);
    if (n && r) return {std::atoi(n), std::atoi(r)};
  }
  return {1, 0};
}


bool writes_outputs() { return !g_job || g_job->rank() % std::max(1, g_tensor_parallel) == 0; }

std::vector<std::int32_t> parse_id_list(const std::string& text, const std::string& option) {
  std::vector<std::int32_t> ids;
  std::string item;
  std::stringstream ss(text);
  while (ss >> item) {
    std::stringstream parts(item);
    std::string part;
    while (std::getline(parts, part, ',')) {
      if (part.empty()) continue;
      std::size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(part, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != part.size() || v < 0 || v > INT32_MAX) bad_input("{}: '{}' is not a token id", option, part);
      ids.push_back(static_cast<std::int32_t>(v));
    }
  }
  if (ids.empty()) bad_input("{}: no token ids given", option);
  return ids;
}

}  // namespace sonde::cli
