// sonde's extensions of a request body (protocol_fields.h): what to capture and where, and the
// request's own edits and steering vectors, with every file name kept under --files-dir.
#include "protocol_fields.h"

#include <sonde/error.h>

#include <fmt/format.h>

#include <cmath>

namespace sonde::serve {
namespace protocol_ext_impl {  // named, not anonymous: unity builds join this file with others

using nlohmann::json;
using namespace protocol_impl;

// "vector" / "direction" given as a list of numbers: kept aside, the edit's source filled in at
// submission (a file of the server's own).
bool inline_vector(json& edit, std::size_t index, const std::string& field, ParsedRequest& out) {
  for (const char* key : {"vector", "direction"}) {
    if (!edit.contains(key) || !edit[key].is_array()) continue;
    const json& v = edit[key];
    if (v.empty() || v.size() > (std::size_t{1} << 20)) bad_field(field + "." + key, "expected 1 to 2^20 numbers");
    InlineVector iv{index, {}};
    for (const auto& x : v) {
      if (!x.is_number() || !std::isfinite(x.get<double>())) bad_field(field + "." + key, "holds a non-number " + shown(x));
      iv.values.push_back(x.get<float>());
    }
    out.inline_vectors.push_back(std::move(iv));
    edit[key] = "inline";
    return true;
  }
  return false;
}

// A file source of an edit (FILE.npy, FILE.h5:/dataset, a stats file): under --files-dir.
std::string checked_source(const std::string& source, const std::string& field, const ModelTraits& m) {
  const auto colon = source.find(":/");
  const std::string file = source.substr(0, colon);
  std::string full = file_under(m.files_dir, file, field).string();
  if (colon != std::string::npos) full += source.substr(colon);
  return full;
}

}  // namespace protocol_ext_impl

std::filesystem::path file_under(const std::filesystem::path& files_dir, const std::string& path, const std::string& field) {
  if (files_dir.empty()) bad_field(field, "this server takes no file names (start it with --files-dir)");
  if (path.empty() || path.find('\0') != std::string::npos) bad_field(field, "an empty file name");
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::path(path).is_absolute() ? std::filesystem::path(path) : files_dir / path;
  const std::filesystem::path real = std::filesystem::weakly_canonical(p, ec);
  if (ec) bad_field(field, "'" + path + "' is not a usable path");
  const auto rel = real.lexically_relative(files_dir);
  if (rel.empty() || rel.native().rfind("..", 0) == 0 || rel == ".")
    bad_field(field, "'" + path + "' is outside --files-dir");
  return real;
}

namespace protocol_impl {

using nlohmann::json;
using namespace protocol_ext_impl;

void capture_of(const json& body, ParsedRequest& out, const ModelTraits& m) {
  CaptureSettings& c = out.capture;
  if (present(body, "hooks")) {
    c.hooks = text(body, "hooks");
    if (c.hooks.empty()) bad_field("hooks", "an empty hook selection");
  }
  for (const char* key : {"positions", "diffusion_capture", "storage", "activations_file"}) {
    if (!present(body, key)) continue;
    if (c.hooks.empty()) bad_field(key, "needs hooks");
    const std::string v = text(body, key);
    if (std::string(key) == "positions") c.positions = v;
    else if (std::string(key) == "diffusion_capture") c.diffusion_capture = v;
    else if (std::string(key) == "storage") c.storage = v;
    else out.activations_file = file_under(m.files_dir, v, key).string();
  }
  if (present(body, "diffusion_capture") && !m.diffusion) bad_field("diffusion_capture", "only a diffusion model has steps");
  if (out.endpoint == Endpoint::Activations && c.hooks.empty()) bad_field("hooks", "missing (which hooks to return)");
  if (out.endpoint == Endpoint::Activations && present(body, "positions")) bad_field("positions", "a forward pass returns every position");
  if (out.endpoint == Endpoint::Activations && present(body, "diffusion_capture"))
    bad_field("diffusion_capture", "a forward pass has no denoising steps");
  const auto checked = [&](const char* key, auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      bad_field(key, e.what());
    }
  };
  checked("positions", [&] { parse_position_policy(c.positions); });
  checked("diffusion_capture", [&] { parse_step_policy(c.diffusion_capture); });
  checked("storage", [&] { c.storage_dtype(); });
  if (c.storage != "f32" && out.activations_file.empty()) bad_field("storage", "responses carry f32 values (bf16 and f16 with activations_file)");
  if (!out.activations_file.empty() && out.activations_file.size() < 4) bad_field("activations_file", "expected a file name");
}

void edits_of(const json& body, ParsedRequest& out, const ModelTraits& m) {
  if (present(body, "edits")) {
    json list = body.at("edits");
    if (list.is_object() && list.contains("edits")) list = json(list["edits"]);
    if (!list.is_array()) bad_field("edits", "expected a list of edits (the --edits JSON schema)");
    if (list.size() > 64) bad_field("edits", "more than 64 edits");
    std::vector<bool> inlined;
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_object()) bad_field(fmt::format("edits[{}]", i), "expected an object");
      inlined.push_back(inline_vector(list[i], i, fmt::format("edits[{}]", i), out));
      if (list[i].contains("op") && list[i]["op"] == "host") bad_field(fmt::format("edits[{}].op", i), "host edits run in-process only");
    }
    try {
      out.edits = parse_edits_json(list, "edits");
    } catch (const Error& e) {
      bad_field("edits", e.what());
    }
    for (std::size_t i = 0; i < out.edits.size(); ++i) {
      EditSpec& e = out.edits[i];
      if (!inlined[i] && !e.source.empty()) e.source = checked_source(e.source, fmt::format("edits[{}]", i), m);
    }
  }
  if (!present(body, "steer")) return;
  const json& steer = body.at("steer");
  if (!steer.is_array() || steer.size() > 64) bad_field("steer", "expected a list of at most 64 steering vectors");
  for (std::size_t i = 0; i < steer.size(); ++i) {
    const std::string field = fmt::format("steer[{}]", i);
    EditSpec e;
    if (steer[i].is_string()) {
      try {
        e = parse_steer(steer[i].get<std::string>());
      } catch (const Error& err) {
        bad_field(field, err.what());
      }
      e.source = checked_source(e.source, field, m);
    } else if (steer[i].is_object()) {
      json s = steer[i];
      for (const auto& [k, v] : s.items())
        if (k != "hook" && k != "vector" && k != "scale" && k != "positions")
          bad_field(field + "." + k, "unknown (steer takes hook, vector, scale, positions)");
      if (!s.contains("hook") || !s["hook"].is_string()) bad_field(field + ".hook", "expected a hook name");
      if (!s.contains("vector")) bad_field(field + ".vector", "missing");
      json one = {{"hook", s["hook"]}, {"op", "add"}, {"vector", s["vector"]}};
      if (s.contains("scale")) one["scale"] = s["scale"];
      if (s.contains("positions")) one["positions"] = s["positions"];
      const bool inl = inline_vector(one, out.edits.size(), field, out);
      try {
        e = parse_edits_json(json::array({one}), "steer").at(0);
      } catch (const Error& err) {
        bad_field(field, err.what());
      }
      if (!inl) e.source = checked_source(e.source, field, m);
    } else {
      bad_field(field, "expected 'HOOK=FILE*SCALE' or {\"hook\", \"vector\", \"scale\"}");
    }
    e.where = field;
    out.edits.push_back(std::move(e));
  }
}

}  // namespace protocol_impl
}  // namespace sonde::serve
