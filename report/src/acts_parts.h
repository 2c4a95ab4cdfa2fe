#pragma once
// The parts of an activation file's panels (collect_acts.cpp puts them together): one prompt's
// rows, its norm heatmaps (collect_norms.cpp) and its diffusion timeline (collect_timeline.cpp).
#include "collect.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sonde::report {

struct Rows {
  std::vector<std::int64_t> pos, step, kind, fresh, token;
  std::size_t size() const { return pos.size(); }
};

Rows read_rows(const H5File& f, std::int64_t start, std::int64_t count);

// Per hook group (blocks.*.X; any other hook alone) a heatmap of the rows' L2 norms: columns
// (layer, pos, step, norm, fresh), within the budget of `o` (docs/report.md); notes say what
// was binned or sampled.
nlohmann::json prompt_norms(const H5File& f, const std::vector<std::string>& hooks, std::int64_t start, const Rows& rows,
                            const ReportOptions& o, const std::string& prompt_id, std::vector<std::string>& notes);

// The mask token id from the file's config_json, if it has one.
std::optional<std::int64_t> mask_id(const nlohmann::json& attrs);

// The prompt's denoising steps (/steps entries of its prompt_idx); null without steps or mask id.
nlohmann::json timeline(const H5File& f, const std::vector<std::int64_t>& step_prompt, std::int64_t prompt_idx,
                        std::optional<std::int64_t> mask, const Rows& rows, const std::vector<double>* confidence,
                        const ReportOptions& o, TokenTable& tokens, std::vector<std::string>& notes);

// Each committed slot's token scored by the confidence it was committed with.
nlohmann::json scored_by_confidence(const nlohmann::json& timeline);

}  // namespace sonde::report
