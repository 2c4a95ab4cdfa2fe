#pragma once
// The root attributes of every activation file (design §5).
#include <sonde/session.h>
#include <sonde/sink.h>

#include <string>

namespace sonde::cli {

RunMetadata run_metadata(Session& session, const std::string& run_config_json, const std::string& storage_dtype);

}  // namespace sonde::cli
