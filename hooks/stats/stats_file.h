#pragma once
// The statistics file (sonde.stats/1): per hook /stats/<hook>/{count, mean, var, m2, min, max,
// absmax, norms, norm_mean, norm_quantiles}, root attributes as the activation file's, and
// /progress/mark [prompts, rows, steps, results_bytes]. Written whole under "<path>.tmp", fsynced
// when durable, then renamed over <path>: a file on disk is always one complete state.
#include "running_stats.h"

#include <sonde/sink.h>

#include <map>
#include <string>
#include <vector>

namespace sonde::stats {

struct HookState {
  HookPoint hook;
  RunningStats stats;
};

struct FileState {
  RunMetadata meta;
  std::map<std::string, HookState> hooks;
  CommitMark mark;
  bool complete = false;
};

void write_stats_file(const std::string& path, const FileState& s, bool durable);
// The state of `path` for these hooks (BadInput when it lacks one or its run_config_sha256 differs).
FileState read_stats_file(const std::string& path, const std::vector<HookPoint>& hooks, const std::string& run_config_sha);

}  // namespace sonde::stats
