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
  std::vector<std::string> keys{};  // an object's keys, checked like the options' own; empty: not checked here
};

const std::vector<RunOptionSpec>& run_option_schema();

const char* run_kind_name(RunKind k);  // forward, generate, score, lens
// BadInput "kind: 'x' is not one of forward, generate, score, lens" (with a close name suggested).
RunKind run_kind_from_name(const std::string& name);

// Checks a JSON object of run options for `kind`: every key in the table (or in `front_end`, the
// caller's own keys, which apply to every kind), of the table's type and applying to `kind`, and
// an object option's keys among its `keys`. BadInput naming `what` (or the object option), the
// key and the closest valid names.
void check_run_options(const nlohmann::json& options, RunKind kind, const std::vector<std::string>& front_end,
                       const std::string& what);

// A front end whose options are flat fields (sonde serve's request body: "positions", "steps")
// names each schema option it takes by its own field: {"positions", "capture.positions"},
// {"steps", "defaults.steps"}, {"seed", "seed"}. The path is a table option, or an object option
// and one of its keys.
struct OptionAlias {
  std::string field;
  std::string path;
};

// The flat counterpart of check_run_options, with the same table and the same rule for close
// names: every key of `fields` is one of `own` (the front end's own fields, for any kind) or an
// alias whose option applies to `kind`. A refusal is BadInput with setting() the field:
// "positons: unknown field; did you mean: positions", "steps: does not apply to a forward run (it
// applies to generate, lens)". An alias whose path is not in the table is the front end's bug:
// RuntimeFailure.
void check_flat_options(const nlohmann::json& fields, RunKind kind, const std::vector<std::string>& own,
                        const std::vector<OptionAlias>& aliases);

}  // namespace sonde
