#pragma once
// The root attributes every sonde output file carries (design §5: version, model, config,
// backend, compute mode, storage dtype, edits), as the run layer writes them: for a front end
// that writes a file outside run() (sonde serve's activations_file), so that its keys are the same.
#include <sonde/run.h>
#include <sonde/sink.h>

#include <nlohmann/json.hpp>

#include <string>

namespace sonde {

RunMetadata output_metadata(const RunModel& model, const nlohmann::json& run_config, const std::string& storage_dtype);

}  // namespace sonde
