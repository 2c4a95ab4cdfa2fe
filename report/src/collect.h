#pragma once
// What the page shows, read from the files: one JSON object per panel's data. The page script
// (page/report.js) draws it; nothing here knows how.
#include "h5_read.h"
#include "tokens.h"

#include <sonde/report.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sonde::report {

// The file's kind from its schema and contents: "acts", "lens" or "stats". BadInput for a file
// sonde did not write, or a one-shot file whose writer did not finish (complete = 0, no mark).
std::string file_kind(H5File& f, const nlohmann::json& attrs);

// An activation file: {"prompts": [...], "hooks": [...], "shown", "total", "partial"} with per
// prompt its text, tokens, diffusion timeline, per-hook norm cells and scored tokens.
nlohmann::json collect_acts(H5File& f, const nlohmann::json& attrs, const ReportOptions& o, TokenTable& tokens,
                            std::vector<std::string>& notes);
nlohmann::json collect_lens(H5File& f, TokenTable& tokens);
nlohmann::json collect_stats(H5File& f, const ReportOptions& o, std::vector<std::string>& notes);

// Evenly spaced picks of n items down to at most `max`, the last always kept (sorted indices).
std::vector<std::size_t> sample_evenly(std::size_t n, std::size_t max);

}  // namespace sonde::report
