// run_schema.h: the run options' table, and the check every JSON front end makes against it.
#include <sonde/did_you_mean.h>
#include <sonde/error.h>
#include <sonde/request.h>
#include <sonde/run_schema.h>

#include <algorithm>

namespace sonde {
namespace {

using K = RunKind;
const std::vector<RunKind> kAll{K::Forward, K::Generate, K::Score, K::Lens};

const char* type_name(OptionType t) {
  switch (t) {
    case OptionType::Bool: return "true or false";
    case OptionType::Int: return "an integer";
    case OptionType::Number: return "a number";
    case OptionType::String: return "a string";
    case OptionType::Object: return "an object";
    case OptionType::List: return "a list";
  }
  return "?";
}

bool has_type(const nlohmann::json& v, OptionType t) {
  switch (t) {
    case OptionType::Bool: return v.is_boolean();
    case OptionType::Int: return v.is_number_integer();
    case OptionType::Number: return v.is_number();
    case OptionType::String: return v.is_string();
    case OptionType::Object: return v.is_object();
    case OptionType::List: return v.is_array();
  }
  return false;
}

std::string kind_list(const std::vector<RunKind>& kinds) {
  std::string s;
  for (auto k : kinds) s += (s.empty() ? "" : ", ") + std::string(run_kind_name(k));
  return s;
}

const RunOptionSpec* find_option(const std::string& name) {
  const auto& table = run_option_schema();
  const auto it = std::find_if(table.begin(), table.end(), [&](const RunOptionSpec& s) { return s.name == name; });
  return it == table.end() ? nullptr : &*it;
}

bool applies(const RunOptionSpec& spec, RunKind kind) {
  return std::find(spec.kinds.begin(), spec.kinds.end(), kind) != spec.kinds.end();
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// "does not apply to a forward run (it applies to generate)": the same words from every front end.
std::string not_for_kind(const RunOptionSpec& spec, RunKind kind) {
  return fmt::format("does not apply to a {} run (it applies to {})", run_kind_name(kind), kind_list(spec.kinds));
}

}  // namespace

const std::vector<RunOptionSpec>& run_option_schema() {
  static const std::vector<RunOptionSpec> table{
      {"kind", OptionType::String, kAll, "forward, generate, score or lens"},
      {"command", OptionType::String, kAll, "recorded in run_config_json"},
      {"overwrite", OptionType::Bool, kAll, "replace existing outputs (check_outputs)"},
      {"sinks", OptionType::List, kAll, "[{name, path, overwrite}]"},
      {"capture", OptionType::Object, {K::Forward, K::Generate, K::Score}, "what to capture (docs/capture.md)",
       {"hooks", "positions", "diffusion_capture", "storage", "compress", "sae_sparse"}},
      {"edits", OptionType::List, {K::Forward, K::Generate}, "interventions (docs/interventions.md)"},
      {"defaults", OptionType::Object, {K::Generate, K::Lens}, "generation settings under every request's own",
       GenerationSettings::keys()},
      {"seed", OptionType::Int, {K::Generate, K::Score}, "request i without a seed uses seed + i"},
      {"results_path", OptionType::String, {K::Generate, K::Score}, "one JSON line per request"},
      {"dataset", OptionType::String, {K::Generate, K::Score}, "a JSONL file of requests"},
      {"batch_size", OptionType::Int, {K::Generate}, "requests per micro-batch"},
      {"use_kv_cache", OptionType::Bool, {K::Generate}, "autoregressive: false recomputes the prefix"},
      {"resume", OptionType::Bool, {K::Generate}, "continue a committed run"},
      {"durable", OptionType::Bool, {K::Generate}, "fsync at each checkpoint"},
      {"record_history", OptionType::Bool, {K::Generate}, "diffusion: every step's canvas"},
      {"keep_results", OptionType::Bool, {K::Generate}, "false: results only in the results file"},
      {"checkpoint_every", OptionType::Int, {K::Generate}, "requests between checkpoints"},
      {"checkpoint_seconds", OptionType::Number, {K::Generate}, "seconds between checkpoints"},
      {"skip_bad", OptionType::Bool, {K::Generate}, "skip a request that cannot run"},
      {"score", OptionType::Object, {K::Score}, "scoring settings", {"samples", "coupled", "record_masks"}},
      {"lens", OptionType::Object, {K::Lens}, "lens settings", {"top_k", "diffusion"}},
  };
  return table;
}

const char* run_kind_name(RunKind k) {
  switch (k) {
    case RunKind::Forward: return "forward";
    case RunKind::Generate: return "generate";
    case RunKind::Score: return "score";
    case RunKind::Lens: return "lens";
  }
  return "?";
}

RunKind run_kind_from_name(const std::string& name) {
  std::vector<std::string> names;
  for (auto k : kAll) {
    if (name == run_kind_name(k)) return k;
    names.push_back(run_kind_name(k));
  }
  bad_setting("kind", "'{}' is not one of {}{}", name, kind_list(kAll), did_you_mean(name, names, 1));
}

void check_run_options(const nlohmann::json& options, RunKind kind, const std::vector<std::string>& front_end,
                       const std::string& what) {
  if (!options.is_object()) bad_input("{}: expected a JSON object, got {}", what, options.dump());
  // Named copies, not a structured binding: clang 14 (the fuzz build's compiler) cannot capture a
  // binding in a lambda.
  for (const auto& item : options.items()) {
    const std::string key = item.key();
    const nlohmann::json& value = item.value();
    if (contains(front_end, key)) continue;
    const RunOptionSpec* spec = find_option(key);
    if (!spec) {
      std::vector<std::string> names = front_end;
      for (const auto& s : run_option_schema()) names.push_back(s.name);
      bad_input("{}: unknown option \"{}\"{}", what, key, did_you_mean(key, names, 2));
    }
    if (!applies(*spec, kind)) bad_input("{}: option \"{}\" {}", what, key, not_for_kind(*spec, kind));
    if (!has_type(value, spec->type))
      bad_input("{}: option \"{}\" must be {}, got {}", what, key, type_name(spec->type), value.dump());
    if (spec->type != OptionType::Object || spec->keys.empty()) continue;
    for (const auto& sub : value.items())
      if (!contains(spec->keys, sub.key()))
        bad_input("{}: unknown option \"{}\"{}", key, sub.key(), did_you_mean(sub.key(), spec->keys, 2));
  }
}

void check_flat_options(const nlohmann::json& fields, RunKind kind, const std::vector<std::string>& own,
                        const std::vector<OptionAlias>& aliases) {
  if (!fields.is_object()) bad_input("expected a JSON object, got {}", fields.dump());
  for (const auto& item : fields.items()) {
    const std::string key = item.key();
    if (contains(own, key)) continue;
    const auto alias = std::find_if(aliases.begin(), aliases.end(), [&](const OptionAlias& a) { return a.field == key; });
    if (alias == aliases.end()) {
      std::vector<std::string> names = own;
      for (const auto& a : aliases) names.push_back(a.field);
      bad_setting(key.c_str(), "unknown field{}", did_you_mean(key, names, 2));
    }
    const std::string top = alias->path.substr(0, alias->path.find('.'));
    const RunOptionSpec* spec = find_option(top);
    const std::string sub = top.size() < alias->path.size() ? alias->path.substr(top.size() + 1) : "";
    if (!spec || (!sub.empty() && !contains(spec->keys, sub)))
      runtime_error("the field {} stands for run option {}, which the run options' table does not have", key, alias->path);
    if (!applies(*spec, kind)) bad_setting(key.c_str(), "{}", not_for_kind(*spec, kind));
  }
}

}  // namespace sonde
