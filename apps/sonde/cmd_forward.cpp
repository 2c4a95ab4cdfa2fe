// sonde forward: one forward pass over one sequence. Writes /input_ids, /logits (unshifted, as
// the model returns them; not with --no-logits, which skips the LM head) and the selected hooks at
// every position, with /rows and /prompts.
#include "app_common.h"
#include "commands.h"
#include "run_flags.h"

#include <sonde/error.h>
#include <sonde/run.h>

#include <filesystem>
#include <iostream>

namespace sonde::cli {

int cmd_forward(const Args& args) {
  CommonOptions common;
  CaptureSettings capture;
  std::string ids_text, text, out, stats, features;
  bool overwrite = false, no_logits = false;
  po::options_description desc("forward options");
  add_common_options(desc, common);
  EditFlags edits;
  add_edit_options(desc, edits);
  SaeFlags sae;
  add_sae_options(desc, sae, &capture);
  desc.add_options()
      ("ids", po::value(&ids_text), "token ids, e.g. 1,2,3")
      ("text", po::value(&text), "text to tokenize with the model's tokenizer")
      ("out", po::value(&out)->required(), "output HDF5 file")
      ("hooks", po::value(&capture.hooks), "hooks to capture: names, aliases, globs, ranges, comma-separated")
      ("storage-dtype", po::value(&capture.storage)->default_value("f32"), "f32, bf16 or f16")
      ("compress", po::bool_switch(&capture.compress), "shuffle + deflate")
      ("stats", po::value(&stats), "running statistics of the --hooks rows, an HDF5 file (also the input of mean edits)")
      ("feature-stats", po::value(&features),
       "per-feature dashboard statistics of the captured *.hook_sae_acts_post rows, an HDF5 file (docs/sae.md)")
      ("no-logits", po::bool_switch(&no_logits),
       "hooks only: skip the LM head and every layer past the last hook; no /logits (root attribute logits = none)")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing output file");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde forward --model DIR (--ids 1,2,3 | --text T) --out F.h5 [--hooks SEL]", desc, vm))
    return 0;
  if (vm.count("ids") == vm.count("text")) bad_input("give exactly one of --ids and --text");
  check_capture_flags(capture, vm);
  if (vm.count("feature-stats") && !vm.count("hooks")) bad_input("--feature-stats needs --hooks (an SAE's hook_sae_acts_post)");
  if (no_logits && capture.hooks.empty()) bad_input("--no-logits: without --hooks there is nothing to compute or write");

  Request request;
  if (vm.count("ids")) {
    request.ids = parse_id_list(ids_text, "--ids");
    request.where = "--ids";
  } else {
    request.text = text;
    request.where = "--text";
  }
  auto session = open_session(common);
  attach_saes(*session, sae);
  RunOptions o;
  o.kind = RunKind::Forward;
  o.command = "forward";
  o.capture = capture;
  o.forward_logits = !no_logits;
  o.edits = edit_specs(edits);
  const bool writes = writes_outputs();  // the other ranks of a tensor-parallel copy compute only
  o.sinks = {writes ? SinkSpec{"hdf5", out, overwrite, nullptr} : SinkSpec{"discard", "", false, discard_sink()}};
  if (!stats.empty() && writes) o.sinks.push_back(SinkSpec{"stats", stats, overwrite, nullptr});
  if (!features.empty() && writes) o.sinks.push_back(SinkSpec{"features", features, overwrite, nullptr});
  // Checked before the run prepares the request, whose errors come first; the sink refuses too.
  if (writes && std::filesystem::exists(out) && !overwrite) bad_input("--out: {} exists (use --overwrite to replace it)", out);
  // With edits the run checks --hooks itself: <hook>.pre_edit exists only once they are set.
  if (o.edits.empty()) as_flag("--hooks", [&] { make_capture_spec(*session, capture, /*per_sequence_ok=*/true); });
  const RunResult res = run(*session, {request}, o);
  if (!writes) return 0;

  const auto T = res.results.front().prompt_ids.size();
  std::cout << "wrote " << out << " (" << session->info().arch << ", backend " << session->backend_name() << ", " << T
            << " tokens)\n"
            << "  /input_ids  [" << T << "] i32\n";
  if (no_logits) std::cout << "  (no /logits: --no-logits; the LM head did not run)\n";
  else std::cout << "  /logits     [" << T << ", " << res.logits.shape()[1] << "] f32\n";
  for (const auto& h : res.hooks) {
    std::string shape = std::to_string(T);
    for (auto d : h.row_shape) shape += ", " + std::to_string(d);
    const std::string sae_acts = ".hook_sae_acts_post";  // stored as CSR with --sae-sparse
    if (capture.sparse_top_k() >= 0 && h.name.size() > sae_acts.size() &&
        h.name.compare(h.name.size() - sae_acts.size(), sae_acts.size(), sae_acts) == 0)
      std::cout << "  /sparse/" << h.name << "/{indptr, indices, values}  CSR of [" << shape << "] " << capture.storage << "\n";
    else
      std::cout << "  /acts/" << h.name << "  [" << shape << "] " << capture.storage << "\n";
  }
  return 0;
}

}  // namespace sonde::cli
