// Parsing edits: the --edits JSON file and the --steer short form (edit_spec.h).
#include <sonde/edit_spec.h>
#include <sonde/error.h>

#include <cmath>
#include <fstream>
#include <set>

namespace sonde {

nlohmann::json EditSpec::to_json() const {
  nlohmann::json j{{"hook", hook}, {"op", op}, {"positions", positions}, {"steps", steps}};
  if (!source.empty()) j["source"] = source;
  if (op == "add" || op == "scale") j["scale"] = scale;
  if (op == "clamp") j["value"] = value;
  if (!heads.empty()) j["heads"] = heads;
  if (op == "sae_feature") {
    j.erase("hook");
    j["sae"] = sae;
    j["feature"] = feature;
    j[feature_op] = feature_op == "value" ? value : scale;
  }
  return j;
}

namespace {

const std::set<std::string> kOps{"add", "scale", "zero", "mean", "project_out", "clamp", "patch", "sae_feature"};
const std::set<std::string> kKeys{"hook", "op", "vector", "direction", "stats", "source", "scale", "factor",
                                  "value", "positions", "steps", "heads", "sae", "feature", "add"};

double number(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto& v = o.at(key);
  if (!v.is_number()) bad_input("{}: '{}' must be a number, got {}", where, key, v.dump());
  return v.get<double>();
}

std::string text(const nlohmann::json& o, const char* key, const std::string& where) {
  const auto& v = o.at(key);
  if (!v.is_string() || v.get<std::string>().empty()) bad_input("{}: '{}' must be a non-empty string, got {}", where, key, v.dump());
  return v.get<std::string>();
}

// {"op": "sae_feature", "sae": ..., "feature": F, "value" | "scale" | "add": x}: the SAE and hook
// are resolved against the attached SAEs later (resolve_edits).
void parse_sae_feature(const nlohmann::json& o, const std::string& where, EditSpec& e) {
  if (o.contains("hook")) bad_input("{}: op sae_feature takes 'sae' (the SAE's folder or hook), not 'hook'", where);
  if (o.contains("sae")) e.sae = text(o, "sae", where);
  if (!o.contains("feature")) bad_input("{}: op sae_feature needs 'feature'", where);
  const auto& f = o.at("feature");
  if (!f.is_number_integer() || f.get<std::int64_t>() < 0) bad_input("{}: 'feature' must be a feature index >= 0, got {}", where, f.dump());
  e.feature = f.get<std::int64_t>();
  int given = 0;
  for (const char* k : {"value", "scale", "add"})
    if (o.contains(k)) {
      ++given;
      e.feature_op = k;
      const double x = number(o, k, where);
      if (!std::isfinite(x)) bad_input("{}: '{}' must be finite, got {}", where, k, o.at(k).dump());
      (e.feature_op == "value" ? e.value : e.scale) = x;
    }
  if (given != 1) bad_input("{}: op sae_feature needs exactly one of 'value' (clamp), 'scale' or 'add' (steer)", where);
  for (const char* k : {"vector", "direction", "stats", "source", "factor", "heads"})
    if (o.contains(k)) bad_input("{}: op sae_feature does not take '{}'", where, k);
}

EditSpec parse_one(const nlohmann::json& o, const std::string& where) {
  if (!o.is_object()) bad_input("{}: an edit is a JSON object, got {}", where, o.dump());
  for (const auto& [k, v] : o.items())
    if (!kKeys.count(k)) bad_input("{}: unknown key '{}' (keys: hook, op, vector, direction, stats, source, scale, factor, value, positions, steps, heads, sae, feature, add)", where, k);
  EditSpec e;
  e.where = where;
  if (!o.contains("op")) bad_input("{}: 'op' is missing", where);
  e.op = text(o, "op", where);
  if (!kOps.count(e.op)) bad_input("{}: op '{}' is not add, scale, zero, mean, project_out, clamp, patch or sae_feature", where, e.op);
  if (e.op == "sae_feature") parse_sae_feature(o, where, e);
  else if (!o.contains("hook")) bad_input("{}: 'hook' is missing", where);
  else e.hook = text(o, "hook", where);
  if (e.op != "sae_feature" && (o.contains("sae") || o.contains("feature") || o.contains("add")))
    bad_input("{}: 'sae', 'feature' and 'add' belong to op sae_feature", where);
  const char* source_key = e.op == "add" ? "vector"
                           : e.op == "project_out" || e.op == "clamp" ? "direction"
                           : e.op == "mean" ? "stats"
                           : e.op == "patch" ? "source" : nullptr;
  if (source_key) {
    if (!o.contains(source_key)) bad_input("{}: op {} needs '{}'", where, e.op, source_key);
    e.source = text(o, source_key, where);
  }
  if (e.op == "sae_feature") {
  } else if (e.op == "add" && o.contains("scale")) e.scale = number(o, "scale", where);
  if (e.op == "scale") {
    if (!o.contains("factor") && !o.contains("scale")) bad_input("{}: op scale needs 'factor'", where);
    e.scale = number(o, o.contains("factor") ? "factor" : "scale", where);
  }
  if (e.op == "clamp") {
    if (!o.contains("value")) bad_input("{}: op clamp needs 'value'", where);
    e.value = number(o, "value", where);
  }
  if (o.contains("positions")) {
    const auto& p = o.at("positions");
    const bool named = p.is_string() && (p == "all" || p == "prompt" || p == "generated");
    bool list = p.is_array() && !p.empty();
    for (const auto& x : p.is_array() ? p : nlohmann::json::array()) list = list && x.is_number_integer() && x.get<std::int64_t>() >= 0;
    if (!named && !list) bad_input("{}: positions must be all, prompt, generated or a list of positions >= 0, got {}", where, p.dump());
    e.positions = p;
  }
  if (o.contains("steps")) {
    const auto& s = o.at("steps");
    if (s.is_number_integer()) e.steps = std::to_string(s.get<std::int64_t>());
    else e.steps = text(o, "steps", where);
  }
  if (o.contains("heads")) {
    const auto& h = o.at("heads");
    bool ok = h.is_array() && !h.empty();
    for (const auto& x : h.is_array() ? h : nlohmann::json::array()) ok = ok && x.is_number_integer() && x.get<std::int64_t>() >= 0;
    if (!ok) bad_input("{}: heads must be a non-empty list of head indices, got {}", where, h.dump());
    e.heads = h.get<std::vector<std::int64_t>>();
  }
  return e;
}

}  // namespace

std::vector<EditSpec> parse_edits_json(const nlohmann::json& j, const std::string& where) {
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    if (!j.contains("edits") || j.size() != 1) bad_input("{}: expected {{\"edits\": [...]}} or a list of edits", where);
    list = &j.at("edits");
  }
  if (!list->is_array() || list->empty()) bad_input("{}: expected a non-empty list of edits", where);
  std::vector<EditSpec> out;
  for (std::size_t i = 0; i < list->size(); ++i) out.push_back(parse_one((*list)[i], fmt::format("{}: edit {}", where, i)));
  return out;
}

std::vector<EditSpec> parse_edits_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) bad_setting("edits", "{}: cannot open the file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    bad_setting("edits", "{}: not JSON: {}", path, e.what());
  }
  return parse_edits_json(j, path);
}

EditSpec parse_steer(const std::string& s) {
  const auto eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size())
    bad_setting("steer", "'{}': expected HOOK=FILE.h5:/dataset*SCALE or HOOK=FILE.npy*SCALE", s);
  EditSpec e;
  e.where = "steer '" + s + "'";  // a front end may name it its own way
  e.hook = s.substr(0, eq);
  e.op = "add";
  std::string rest = s.substr(eq + 1);
  const auto star = rest.rfind('*');
  if (star != std::string::npos) {
    const std::string factor = rest.substr(star + 1);
    std::size_t used = 0;
    try {
      e.scale = std::stod(factor, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (factor.empty() || used != factor.size()) bad_setting("steer", "'{}': scale '{}' is not a number", s, factor);
    // stod reads "nan" and "inf": a steer by them would write NaN logits and exit 0.
    if (!std::isfinite(e.scale)) bad_setting("steer", "'{}': scale '{}' is not a finite number", s, factor);
    rest = rest.substr(0, star);
  }
  if (rest.empty()) bad_setting("steer", "'{}': no vector source", s);
  e.source = rest;
  return e;
}

}  // namespace sonde
