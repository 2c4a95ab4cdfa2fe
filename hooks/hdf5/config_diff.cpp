#include "config_diff.h"

#include <nlohmann/json.hpp>

#include <vector>

namespace sonde::hdf5 {
namespace {

using nlohmann::json;

// Long values (the prompts of a one-shot file, hashes) are shortened: the name is what matters.
std::string shown(const json& v) {
  if (v.is_null()) return "absent";
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

void diff(const json& a, const json& b, const std::string& at, std::vector<std::string>& out) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [k, v] : a.items()) diff(v, b.contains(k) ? b[k] : json(), at.empty() ? k : at + "." + k, out);
    for (const auto& [k, v] : b.items())
      if (!a.contains(k)) diff(json(), v, at.empty() ? k : at + "." + k, out);
    return;
  }
  if (a == b) return;
  // Inputs and model files are recorded by digest: say what the digest stands for.
  if (at == "input_sha256") return out.push_back("the --input file's content changed");
  if (at == "model_config_sha256") return out.push_back("the model's config.json changed");
  out.push_back(at + " was " + shown(a) + ", now " + shown(b));
}

}  // namespace

std::string config_changes(const std::string& before_json, const std::string& after_json) {
  const json a = json::parse(before_json, nullptr, false), b = json::parse(after_json, nullptr, false);
  if (a.is_discarded() || b.is_discarded()) return "";
  std::vector<std::string> out;
  diff(a, b, "", out);
  std::string s;
  for (const auto& c : out) s += (s.empty() ? "" : "; ") + c;
  return s;
}

}  // namespace sonde::hdf5
