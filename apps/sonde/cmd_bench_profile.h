#pragma once
// sonde bench --profile: the executor's per-node wall time over the timed runs (exec_profile.h),
// and --hooks: hook points tapped in each prefill as a capture would, so their cost is in the
// figures (an SAE's hook_sae_acts_post cut to its kept entries as sparse storage cuts it).
#include <sonde/exec_profile.h>
#include <sonde/executor.h>
#include <sonde/session.h>

#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace sonde::cli {

// The comma-separated --hooks, each checked against the session's hook points (BadInput naming it).
std::set<std::string> bench_hooks(const Session& s, const std::string& list);
// The tap of a bench run: *.hook_sae_acts_post rows through sparse_row_entries (non-zero entries,
// values gathered, as the sinks do), every other hook dropped.
Executor::Tap bench_tap();
// {"runs", "node_seconds", "by_kind": [{op, seconds, nodes}], "nodes": [{name, op, shape, runs,
// seconds, taps, tap_seconds, flops, sibling}]}: sums over the profiled runs, nodes in forward order.
nlohmann::ordered_json profile_json(const ExecProfile& p);
// Time per op kind and the `top` nodes by time, per run.
void print_profile(const nlohmann::ordered_json& profile, int top);

}  // namespace sonde::cli
