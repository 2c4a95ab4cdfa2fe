#pragma once
#include <initializer_list>
#include <utility>
// The command-line flags of a run shared by forward, generate and batch: capture settings and
// generation settings, parsed into the run layer's types (sonde/run.h). Errors name the flag.
#include "app_common.h"

#include <sonde/error.h>
#include <sonde/run.h>

#include <fmt/core.h>

namespace sonde::cli {

// Runs `check`; a sonde::Error it throws is rethrown naming `flag` in place of the setting it
// named ("--hooks: 'x' matches no hook point", not "--hooks: hooks: ..."). An error that names
// no setting (a broken tokenizer.json met while resolving hooks) is not the flag's: it goes on as it is.
template <typename F>
void as_flag(const char* flag, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    if (e.setting().empty()) throw;
    throw Error(e.kind(), fmt::format("{}: {}", flag, e.detail()));
  }
}

// As as_flag, for a check that may name one of several settings: each named by its flag.
template <typename F>
void as_flags(std::initializer_list<std::pair<const char*, const char*>> flags, F&& check) {
  try {
    check();
  } catch (const Error& e) {
    for (const auto& [setting, flag] : flags)
      if (e.setting() == setting) throw Error(e.kind(), fmt::format("{}: {}", flag, e.detail()));
    throw;
  }
}

// --hooks, --positions, --diffusion-capture, --storage-dtype, --compress.
void add_capture_options(po::options_description& desc, CaptureSettings& c);
// Checks the policies, the storage dtype and, when --hooks was given, that it names something,
// before anything is opened.
void check_capture_flags(const CaptureSettings& c, const po::variables_map& vm);

// --edits FILE (JSON) and --steer 'HOOK=FILE.h5:/v*SCALE' (repeatable): interventions.
struct EditFlags {
  std::string file;
  std::vector<std::string> steer;
};
void add_edit_options(po::options_description& desc, EditFlags& e);
// The edits of --edits then --steer, parsed (BadInput naming the flag).
std::vector<EditSpec> edit_specs(const EditFlags& e);

// --sae DIR (repeatable), --sae-splice, --sae-error-term: SAEs and transcoders as hook points
// (docs/sae.md).
struct SaeFlags {
  std::vector<std::string> dirs;
  bool splice = false, error_term = false;
};
// With `capture`, also --sae-sparse nonzero|top:K (CaptureSettings::sae_sparse).
void add_sae_options(po::options_description& desc, SaeFlags& f, CaptureSettings* capture = nullptr);
// Loads each --sae folder and attaches it to the session (BadInput naming the folder, file and field).
void attach_saes(Session& s, const SaeFlags& f);

// --max-new-tokens, --temperature, --top-k, --top-p, --steps, --alg; with `all` also
// --repetition-penalty, --alg-temp, --eps and --stop (repeatable).
void add_generation_options(po::options_description& desc, bool all);
// The generation flags given on the command line (unset ones stay unset); checks their values.
GenerationSettings generation_settings(const po::variables_map& vm);

}  // namespace sonde::cli
