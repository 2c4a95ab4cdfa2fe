// sonde score: log-likelihood of completions given prompts, a Score run of the run layer (run.h).
// Input lines {"id", "prompt" | "messages" | "ids", "completion" | "completion_ids"}
// (read_score_dataset); output lines carry the id, the per-token log-probabilities
// (autoregressive) and their sum as "logprob"; for a diffusion model, the Monte Carlo estimate of
// the bound as "logprob" with its "stderr".
#include "app_common.h"
#include "commands.h"
#include "run_flags.h"

#include <sonde/dataset.h>
#include <sonde/error.h>
#include <sonde/run.h>

#include <iostream>

namespace sonde::cli {

int cmd_score(const Args& args) {
  CommonOptions common;
  std::string input, output, out_h5;
  RunOptions o;
  o.kind = RunKind::Score;
  o.command = "score";
  po::options_description desc("score options");
  add_common_options(desc, common);
  desc.add_options()
      ("input", po::value(&input)->required(), "JSONL: {\"id\", \"prompt\" | \"messages\" | \"ids\", \"completion\" | \"completion_ids\"}")
      ("output", po::value(&output)->required(), "JSONL: id, token_logprobs, logprob, ... per input line")
      ("samples", po::value(&o.score.samples)->default_value(32), "diffusion: Monte Carlo samples (forward passes)")
      ("coupled", po::bool_switch(&o.score.coupled), "diffusion: complementary mask pairs (each token scored once per pair)")
      ("seed", po::value(&o.seed)->default_value(0), "diffusion: the masks' seed (line i uses seed + i)")
      ("record-masks", po::bool_switch(&o.score.record_masks), "diffusion: each sample's t, weight, masked indices and loss")
      ("hooks", po::value(&o.capture.hooks), "autoregressive: hooks to capture over prompt + completion (with --out)")
      ("out", po::value(&out_h5), "HDF5 activation file for --hooks (sonde.acts/1; rows: prompt then completion)")
      ("overwrite", po::bool_switch(&o.overwrite), "replace an existing --output / --out");
  po::variables_map vm;
  if (!parse_options(args, "usage: sonde score --model DIR --input F.jsonl --output S.jsonl [--samples K --coupled --seed S]", desc, vm))
    return 0;
  if (!std::filesystem::exists(input)) bad_input("--input: {} does not exist", input);
  if (o.capture.hooks.empty() != out_h5.empty()) bad_input("--hooks and --out go together");
  o.results_path = output;
  o.dataset_path = input;
  if (!out_h5.empty()) o.sinks = {SinkSpec{"hdf5", out_h5, o.overwrite, nullptr}};
  const auto flags = {std::pair{"output", "--output"}, std::pair{"hdf5", "--out"}, std::pair{"hooks", "--hooks"},
                      std::pair{"samples", "--samples"}};
  as_flags(flags, [&] { check_outputs(o); });
  const Dataset lines = read_score_dataset(input);  // every line checked before the model loads
  auto session = open_session(common);
  RunResult res;
  as_flags(flags, [&] { res = run(*session, lines.requests, o); });
  std::cout << "scored " << res.scores.size() << " completions -> " << output << "\n";
  return 0;
}

}  // namespace sonde::cli
