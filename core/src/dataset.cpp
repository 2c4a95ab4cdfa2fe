#include <sonde/dataset.h>
#include <sonde/error.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <fstream>
#include <map>

namespace sonde {
namespace {

using nlohmann::json;

// Thrown for one bad line; caught by the reader, which adds the file and line number.
struct LineError {
  std::string why;
};

[[noreturn]] void bad_line(std::string why) { throw LineError{std::move(why)}; }

std::string id_of(const json& j) {
  if (!j.contains("id")) bad_line("no \"id\" field");
  const auto& id = j["id"];
  if (id.is_string() && !id.get<std::string>().empty()) return id.get<std::string>();
  if (id.is_number_integer()) return id.dump();
  bad_line("\"id\" must be a non-empty string or an integer, got " + id.dump());
}

std::vector<std::int32_t> token_ids(const json& value, const char* key) {
  if (!value.is_array() || value.empty()) bad_line(std::string("\"") + key + "\" must be a non-empty array of token ids");
  std::vector<std::int32_t> out;
  for (const auto& v : value) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)
      bad_line(std::string("\"") + key + "\" holds " + v.dump() + ", not a token id");
    out.push_back(v.get<std::int32_t>());
  }
  return out;
}

// A scoring line's completion: exactly one of completion (text) and completion_ids.
void completion_of(const json& j, Request& r) {
  if (j.contains("completion") == j.contains("completion_ids")) bad_line("needs exactly one of \"completion\" and \"completion_ids\"");
  if (j.contains("completion_ids")) {
    r.completion_ids = token_ids(j["completion_ids"], "completion_ids");
  } else {
    if (!j["completion"].is_string()) bad_line("\"completion\" must be a string");
    r.completion = j["completion"].get<std::string>();
  }
}

// score: a scoring line (an optional id, a completion, no generation settings); `index` its
// request index, the id of a line without one.
Request parse_line(const std::string& text, std::int64_t line, bool score = false, std::size_t index = 0) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e999
    bad_line(std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) bad_line("not a JSON object");
  Request r;
  r.where = "line " + std::to_string(line);
  r.id = score && !j.contains("id") ? std::to_string(index) : id_of(j);
  if (score) completion_of(j, r);
  const int inputs = static_cast<int>(j.contains("prompt")) + static_cast<int>(j.contains("messages")) +
                     static_cast<int>(j.contains("ids"));
  if (inputs != 1) bad_line("needs exactly one of \"prompt\", \"messages\" and \"ids\"");
  json settings = json::object();
  for (const auto& [key, value] : j.items()) {
    if (key == "id" || (score && (key == "completion" || key == "completion_ids"))) continue;
    if (score && key != "prompt" && key != "messages" && key != "ids")
      bad_line("unknown key '" + key + "' (keys: id, prompt, messages, ids, completion, completion_ids)");
    if (key == "prompt") {
      if (!value.is_string() || value.get<std::string>().empty()) bad_line("\"prompt\" must be a non-empty string");
      r.text = value.get<std::string>();
    } else if (key == "messages") {
      if (!value.is_array() || value.empty()) bad_line("\"messages\" must be a non-empty array");
      for (const auto& m : value) {
        if (!m.is_object() || !m.contains("role") || !m.contains("content") || !m["role"].is_string() || !m["content"].is_string())
          bad_line("each message needs string \"role\" and \"content\"");
        r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      }
    } else if (key == "ids") {
      r.ids = token_ids(value, "ids");
    } else {
      settings[key] = value;
    }
  }
  try {
    r.settings = GenerationSettings::from_json(settings);
  } catch (const Error& e) {
    bad_line(e.what());
  }
  return r;
}


Dataset read_lines(const std::filesystem::path& file, bool skip_bad, bool score) {
  std::ifstream in(file);
  if (!in) bad_input("dataset: cannot read '{}'", file.string());
  Dataset out;
  std::map<std::string, std::int64_t> first_line;  // id -> line it first appeared on
  std::string text;
  for (std::int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      Request r = parse_line(text, line, score, out.requests.size());
      if (auto [it, fresh] = first_line.emplace(r.id, line); !fresh)
        bad_line("id \"" + r.id + "\" repeats line " + std::to_string(it->second));
      out.requests.push_back(std::move(r));
    } catch (const LineError& e) {
      if (!skip_bad) bad_input("{} line {}: {}", file.string(), line, e.why);
      out.skipped.push_back("line " + std::to_string(line) + ": " + e.why);
    }
  }
  if (out.requests.empty()) bad_input("dataset: {} holds no requests", file.string());
  return out;
}

}  // namespace

Dataset read_dataset(const std::filesystem::path& file, bool skip_bad) { return read_lines(file, skip_bad, false); }

Dataset read_score_dataset(const std::filesystem::path& file) { return read_lines(file, false, true); }

}  // namespace sonde
