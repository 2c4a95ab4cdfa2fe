#pragma once
// The run options as data (design §8 "config is data"): each option's name, JSON type and the run
// kinds it applies to, the one table that every front end reaching run() through JSON (Python,
// the HTTP server) checks its options against before a run, so that a misspelt option or one that
// does not apply to the run kind is refused in one line with the closest valid name, never dropped.
#include <sonde/run.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace sonde {

enum class OptionType { Bool, Int, Number, String, Object, List };

struct RunOptionSpec {
  std::string name;
  OptionType type;
  std::vector<RunKind> kinds;  // the run kinds it applies to
  std::string help;
};

const std::vector<RunOptionSpec>& run_option_schema();

const char* run_kind_name(RunKind k);  // forward, generate, score, lens
// BadInput "kind: 'x' is not one of forward, generate, score, lens" (with a close name suggested).
RunKind run_kind_from_name(const std::string& name);

// Checks a JSON object of run options for `kind`: every key in the table (or in `front_end`, the
// caller's own keys, which apply to every kind), of the table's type and applying to `kind`.
// BadInput naming `what`, the key and the closest valid names.
void check_run_options(const nlohmann::json& options, RunKind kind, const std::vector<std::string>& front_end,
                       const std::string& what);

}  // namespace sonde
