#pragma once
// What changed between the run configuration a file was written with and this run's, as one
// readable clause ("defaults.temperature was 0.8, now 1; batch_size was 4, now 8").
#include <string>

namespace sonde::hdf5 {

std::string config_changes(const std::string& before_json, const std::string& after_json);

}  // namespace sonde::hdf5
