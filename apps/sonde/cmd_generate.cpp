// sonde generate: the model's decoding (autoregressive for Qwen2, Dream's diffusion_generate) on
// one or several prompts (design §6). Text streams to the terminal as it is made; --json prints
// one object per prompt instead.
#include "app_common.h"
#include "commands.h"
#include "run_flags.h"

#include <sonde/error.h>
#include <sonde/run.h>
#include <sonde/stop_strings.h>
#include <sonde/tokenizer.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <iostream>
#include <optional>

namespace sonde::cli {
namespace {

// On a terminal, control characters of the text (a random-weight model makes many) are shown as
// \xNN instead of being sent raw, where they would move the cursor or ring the bell; tabs and
// newlines are text. Piped output is the text itself.
std::string visible(const std::string& text) {
  static const bool tty = ::isatty(STDOUT_FILENO) != 0;
  if (!tty) return text;
  std::string out;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if ((u < 0x20 && ch != '\n' && ch != '\t') || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += ch;
  }
  return out;
}

struct GenerateOptions {
  CommonOptions common;
  CaptureSettings capture;
  EditFlags edits;
  SaeFlags sae;
  std::vector<std::string> ids;
  std::string prompt, out, stats, features;
  bool chat = false, json = false, history = false, no_cache = false, overwrite = false;
  std::uint64_t seed = 0;
};

void print_json(const RequestResult& r, bool history) {
  nlohmann::json j{{"prompt_ids", r.prompt_ids}, {"completion_ids", r.completion}, {"finish_reason", r.finish_reason}};
  j["completion"] = r.completion_text ? nlohmann::json(*r.completion_text) : nlohmann::json(nullptr);
  if (history && !r.history.empty()) j["history"] = r.history;
  std::cout << j.dump() << "\n";
}

// --ids prompts first, then --prompt (rendered with the chat template under --chat).
std::vector<Request> requests(const GenerateOptions& o, const po::variables_map& vm, const GenerationSettings& settings) {
  std::vector<Request> out;
  for (const auto& ids : o.ids) {
    Request r;
    r.where = "prompt " + std::to_string(out.size());
    r.ids = parse_id_list(ids, "--ids");
    out.push_back(std::move(r));
  }
  if (vm.count("prompt")) {
    Request r;
    r.where = "--prompt";
    if (o.chat) r.messages = {{"user", o.prompt}};
    else r.text = o.prompt;
    out.push_back(std::move(r));
  }
  for (auto& r : out) r.settings = settings;
  return out;
}

}  // namespace

int cmd_generate(const Args& args) {
  GenerateOptions o;
  po::options_description desc("generate options");
  add_common_options(desc, o.common);
  desc.add_options()
      ("prompt", po::value(&o.prompt), "prompt text (needs the model's tokenizer)")
      ("ids", po::value(&o.ids)->composing(), "prompt token ids, e.g. 1,2,3; repeat for a batch of prompts")
      ("chat", po::bool_switch(&o.chat), "wrap --prompt in the model's chat template")
      ("seed", po::value(&o.seed)->default_value(0), "seed of the first prompt; prompt r uses seed + r")
      ("json", po::bool_switch(&o.json), "print one JSON object per prompt")
      ("history", po::bool_switch(&o.history), "diffusion, with --json: the canvas after every step")
      ("no-kv-cache", po::bool_switch(&o.no_cache), "autoregressive: recompute the whole prefix every step")
      ("out", po::value(&o.out), "HDF5 file for the activations selected with --hooks")
      ("stats", po::value(&o.stats), "running statistics of the --hooks rows, an HDF5 file")
      ("feature-stats", po::value(&o.features),
       "per-feature dashboard statistics of the captured *.hook_sae_acts_post rows, an HDF5 file (docs/sae.md)")
      ("overwrite", po::bool_switch(&o.overwrite), "replace an existing --out file");
  add_generation_options(desc, /*all=*/true);
  add_capture_options(desc, o.capture);
  add_edit_options(desc, o.edits);
  add_sae_options(desc, o.sae, &o.capture);
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde generate --model DIR (--prompt T | --ids 1,2,3 ...) [--chat] [--max-new-tokens N] [--json]",
                     desc, vm))
    return 0;
  if (vm.count("out") && !vm.count("hooks")) bad_input("--out needs --hooks");
  if (vm.count("hooks") && !vm.count("out") && !vm.count("stats") && !vm.count("feature-stats"))
    bad_input("--hooks needs --out or --stats (or --feature-stats)");
  if (vm.count("stats") && !vm.count("hooks")) bad_input("--stats needs --hooks");
  if (vm.count("feature-stats") && !vm.count("hooks")) bad_input("--feature-stats needs --hooks (an SAE's hook_sae_acts_post)");
  check_capture_flags(o.capture, vm);
  if (o.ids.empty() == !vm.count("prompt")) bad_input("give --prompt or --ids (not both)");
  if (o.chat && !vm.count("prompt")) bad_input("--chat needs --prompt");
  const GenerationSettings settings = generation_settings(vm);

  auto session = open_session(o.common);
  attach_saes(*session, o.sae);
  RunOptions ro;
  ro.command = "generate";
  ro.seed = o.seed;
  ro.use_kv_cache = !o.no_cache;
  ro.record_history = o.history;
  ro.capture = o.capture;
  ro.edits = edit_specs(o.edits);
  const bool writes = writes_outputs();  // the other ranks of a tensor-parallel copy compute only
  if (!o.out.empty() || !o.stats.empty() || !o.features.empty()) {
    if (ro.edits.empty()) as_flag("--hooks", [&] { make_capture_spec(*session, o.capture); });  // else the run checks
    if (!o.out.empty())
      ro.sinks.push_back(writes ? SinkSpec{"hdf5", o.out, o.overwrite, nullptr} : SinkSpec{"discard", "", false, discard_sink()});
    if (!o.stats.empty() && writes) ro.sinks.push_back(SinkSpec{"stats", o.stats, o.overwrite, nullptr});
    if (!o.features.empty() && writes) ro.sinks.push_back(SinkSpec{"features", o.features, o.overwrite, nullptr});
  }
  const auto reqs = requests(o, vm, settings);

  // One prompt's tokens stream to the terminal as they are chosen (autoregressive decoding);
  // the terminal never shows a stop string or what follows it.
  const Tokenizer* tok = session->tokenizer();
  std::optional<StreamDecoder> stream;
  StopStringFilter shown(settings.stop.value_or(std::vector<std::string>{}));
  if (!o.json && reqs.size() == 1 && tok && writes) {
    stream.emplace(*tok, false);
    ro.on_token = [&](std::int64_t, std::int32_t token) { std::cout << visible(shown.push(stream->push(token))) << std::flush; };
  }
  bool streamed = false;
  if (ro.on_token)
    ro.on_token = [&, show = ro.on_token](std::int64_t r, std::int32_t t) {
      streamed = true;
      show(r, t);
    };
  const RunResult res = run(*session, reqs, ro);
  if (streamed) std::cout << visible(shown.push(stream->finish()) + shown.finish()) << "\n";
  if (!writes) return 0;
  for (const auto& r : res.results) {
    if (o.json) print_json(r, o.history);
    else if (!streamed) std::cout << visible(r.completion_text ? *r.completion_text : nlohmann::json(r.completion).dump()) << "\n";
  }
  // What was written, on stderr: stdout stays the generated text (or JSON lines).
  if (!o.out.empty())
    std::cerr << "wrote " << o.out << " (" << res.totals.prompts << (res.totals.prompts == 1 ? " prompt, " : " prompts, ")
              << res.totals.rows << " rows of " << res.hooks.size() << (res.hooks.size() == 1 ? " hook)\n" : " hooks)\n");
  if (!o.stats.empty()) std::cerr << "wrote " << o.stats << " (statistics of " << res.hooks.size() << " hooks)\n";
  if (!o.features.empty()) std::cerr << "wrote " << o.features << " (feature statistics)\n";
  return 0;
}

}  // namespace sonde::cli
