#pragma once
// sonde report (issue 32): one self-contained HTML page (plotting library, page script and data
// inlined; nothing fetched when it is viewed) showing what is in any file sonde writes: the run
// card, the diffusion timeline, per-hook row norms, the logit lens, statistics and the generated
// text coloured by log-probability or commit confidence. The command line (`sonde report`) and
// Python (`sonde.report`) both call write_report. docs/report.md describes the page.
#include <cstdint>
#include <string>
#include <vector>

namespace sonde {

struct ReportOptions {
  std::string dump;                  // an activation, lens or statistics file
  std::vector<std::string> stats;    // more statistics files (`sonde.stats/1`)
  std::vector<std::string> lens;     // more logit lens files (`sonde lens --out`)
  std::vector<std::string> prompts;  // the dataset ids to show; empty: the first max_prompts
  std::string model;                 // where to find the tokenizer; empty: the file's model_path
  std::string out;
  bool overwrite = false;
  // The page's budget (docs/report.md): prompts shown without `prompts`; columns per heatmap
  // (beyond: consecutive positions averaged in bins); steps per heatmap and timeline (beyond:
  // evenly spaced steps, the last kept); cells per heatmap (fewer steps, then wider bins);
  // features per statistics chart (beyond: evenly spaced features, every outlier kept).
  std::int64_t max_prompts = 4;
  std::int64_t max_positions = 256;
  std::int64_t max_steps = 64;
  std::int64_t max_cells = 16384;
  std::int64_t max_features = 4096;
};

struct ReportSummary {
  std::vector<std::string> panels;  // "run", "timeline", "norms", "text", "lens", "stats"
  std::vector<std::string> notes;   // what was sampled or left out, as the page says it
  std::uintmax_t bytes = 0;         // the page's size
};

// BadInput (exit 2) naming the file and what is wrong: not a sonde file, unreadable or truncated,
// a one-shot file whose writer did not finish, an unknown --prompt id, an existing `out` without
// `overwrite`, or the plotting library not installed (the message names the npm ci to run). A
// streaming file still being written is shown up to its last checkpoint and says so.
ReportSummary write_report(const ReportOptions& options);

}  // namespace sonde
