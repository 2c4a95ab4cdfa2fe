#pragma once
// Option handling shared by the commands: the common options of design §6, --help, --config.
#include <sonde/session.h>

#include <boost/program_options.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sonde::cli {

namespace po = boost::program_options;

struct CommonOptions {
  std::string model, backend, plugin_dir, log_level = "warn", config_file;
  int threads = 0;
  std::string weights = "native";
  std::string shard_backend = "threaded";  // --backend sharded: the local backend of each rank
  int tensor_parallel = 0;                 // ranks per model copy; 0: the command's default
  std::string compute = "f32";             // --compute: the Linear ops' precision (<sonde/compute.h>)
};

// The job this process is a rank of (set when a session opens on a multi-process backend): an
// error on one rank ends the whole job through it (main.cpp), so no rank waits forever.
ProcessGroup* current_job();
// The launcher's (mpiexec's) job size and this process's rank, from its environment, known before
// any MPI call; {1, 0} outside mpiexec.
std::pair<int, int> launcher_job();
// Whether this process writes the command's files and report: not the other ranks of a
// tensor-parallel model copy, which compute in step with its first rank.
bool writes_outputs();

// Adds --model (when with_model), --backend, --threads, --plugin-dir, --log-level, --config.
void add_common_options(po::options_description& desc, CommonOptions& o, bool with_model = true);

// Parses args (and the --config file, if any) into vm; returns false after printing --help.
bool parse_options(const std::vector<std::string>& args, const std::string& usage,
                   const po::options_description& desc, po::variables_map& vm,
                   const po::positional_options_description* positional = nullptr);

// Applies --log-level and opens the model on the chosen backend.
std::unique_ptr<Session> open_session(const CommonOptions& o);

// "1,2,3" or "1 2 3" -> ids; a bad entry is a BadInput error naming the option and the entry.
std::vector<std::int32_t> parse_id_list(const std::string& text, const std::string& option);

}  // namespace sonde::cli
