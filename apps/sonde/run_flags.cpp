#include "run_flags.h"

#include <sonde/capture.h>
#include <sonde/sampling.h>

namespace sonde::cli {
namespace {

template <typename T>
std::optional<T> flag(const po::variables_map& vm, const char* name) {
  return vm.count(name) ? std::optional<T>(vm[name].as<T>()) : std::nullopt;
}

}  // namespace

void add_capture_options(po::options_description& desc, CaptureSettings& c) {
  desc.add_options()
      ("hooks", po::value(&c.hooks), "hooks to capture: names, aliases, globs, ranges, comma-separated")
      ("positions", po::value(&c.positions)->default_value("all"), "all, prompt, generated or last")
      ("diffusion-capture", po::value(&c.diffusion_capture)->default_value("commit"),
       "diffusion steps captured: commit, final, all or every:K")
      ("storage-dtype", po::value(&c.storage)->default_value("f32"), "f32, bf16 or f16")
      ("compress", po::bool_switch(&c.compress), "shuffle + deflate the activations (smaller files, slower writes)");
}

void check_capture_flags(const CaptureSettings& c, const po::variables_map& vm) {
  if (vm.count("hooks") && c.hooks.find_first_not_of(", \t") == std::string::npos)
    bad_input("--hooks: '{}' names no hook (list them with `sonde hooks --model DIR`)", c.hooks);
  as_flag("--positions", [&] { parse_position_policy(c.positions); });
  as_flag("--diffusion-capture", [&] { parse_step_policy(c.diffusion_capture); });
  as_flag("--storage-dtype", [&] { c.storage_dtype(); });
  as_flag("--sae-sparse", [&] { c.sparse_top_k(); });
}

void add_generation_options(po::options_description& desc, bool all) {
  desc.add_options()
      ("max-new-tokens", po::value<std::int64_t>(), "tokens to generate (default: generation_config.json, else 64)")
      ("temperature", po::value<double>(), "0: greedy / argmax")
      ("top-k", po::value<std::int64_t>(), "keep the k most likely tokens")
      ("top-p", po::value<double>(), "nucleus sampling mass")
      ("steps", po::value<std::int64_t>(), "diffusion steps (default: max-new-tokens)")
      ("alg", po::value<std::string>(),
       "diffusion: origin, maskgit_plus, topk_margin, entropy (default) or confidence_threshold")
      ("diffusion-mode", po::value<std::string>(),
       "diffusion: exact (default), block (blocks filled left to right), block-cache or dual-cache (block mode over "
       "Fast-dLLM's prefix or dual K/V cache: approximate, docs/generation.md; LLaDA: exact, block-cache or dual-cache "
       "over its block_length blocks, docs/models.md)")
      ("block-size", po::value<std::int64_t>(),
       "diffusion block mode: slots per block (default 32; the last may be shorter); Fast-dLLM v2: batch_sample's "
       "block_size (default config.json's bd_size)")
      ("small-block-size", po::value<std::int64_t>(),
       "Fast-dLLM v2: sub-block size inside a block, dividing --block-size (default 8)")
      ("threshold", po::value<double>(),
       "alg confidence_threshold (LLaDA: alone): commit every slot with p >= this, in (0, 1] (Dream's default 0.9); "
       "Fast-dLLM v2: commit every masked slot of the sub-block with p > this (default 0.9)")
      ("tokens-per-step", po::value<std::int64_t>(), "diffusion: commit this many slots per step instead of the steps schedule")
      ("refresh-every", po::value<std::int64_t>(),
       "block-cache, dual-cache: also refresh the whole K/V cache every N steps of a block (dKV-Cache-style; default: "
       "only at a block's first step)")
      ("block-length", po::value<std::int64_t>(),
       "LLaDA's generate: slots per semi-autoregressive block, dividing max-new-tokens (default: max-new-tokens)")
      ("remasking", po::value<std::string>(), "LLaDA's generate: low_confidence (default) or random")
      ("cfg-scale", po::value<double>(), "LLaDA's generate: classifier-free guidance scale (default 0: off)");
  if (!all) return;
  desc.add_options()
      ("repetition-penalty", po::value<double>(), "autoregressive only")
      ("alg-temp", po::value<double>(), "diffusion: > 0 samples positions from softmax(conf / alg_temp)")
      ("eps", po::value<double>(), "diffusion: final timestep (default 1e-3)")
      ("eos-penalty", po::value<double>(),
       "diffusion: Dream-Coder's padding penalty, eos_penalty * log(1 - t + 1e-3) on the pad token's logit (default: "
       "generation_config.json, else 0)")
      ("stop", po::value<std::vector<std::string>>()->composing(),
       "autoregressive: stop when the completion text contains this string (repeatable); the text "
       "ends before it, the ids keep every token up to the one that completed it");
}

GenerationSettings generation_settings(const po::variables_map& vm) {
  GenerationSettings s;
  s.max_new_tokens = flag<std::int64_t>(vm, "max-new-tokens");
  s.top_k = flag<std::int64_t>(vm, "top-k");
  s.steps = flag<std::int64_t>(vm, "steps");
  s.temperature = flag<double>(vm, "temperature");
  s.top_p = flag<double>(vm, "top-p");
  s.repetition_penalty = flag<double>(vm, "repetition-penalty");
  s.alg_temp = flag<double>(vm, "alg-temp");
  s.eos_penalty = flag<double>(vm, "eos-penalty");
  s.eps = flag<double>(vm, "eps");
  s.alg = flag<std::string>(vm, "alg");
  s.stop = flag<std::vector<std::string>>(vm, "stop");
  s.diffusion_mode = flag<std::string>(vm, "diffusion-mode");
  s.block_size = flag<std::int64_t>(vm, "block-size");
  s.threshold = flag<double>(vm, "threshold");
  s.tokens_per_step = flag<std::int64_t>(vm, "tokens-per-step");
  s.refresh_every = flag<std::int64_t>(vm, "refresh-every");
  s.block_length = flag<std::int64_t>(vm, "block-length");
  s.remasking = flag<std::string>(vm, "remasking");
  s.cfg_scale = flag<double>(vm, "cfg-scale");
  s.small_block_size = flag<std::int64_t>(vm, "small-block-size");
  if (s.max_new_tokens && *s.max_new_tokens < 1) bad_input("--max-new-tokens must be at least 1, got {}", *s.max_new_tokens);
  if (s.steps && *s.steps < 1) bad_input("--steps must be at least 1, got {}", *s.steps);
  if (s.alg) as_flag("--alg", [&] { parse_diffusion_alg(*s.alg); });
  s.check();  // the same rules as for dataset lines: "temperature: -1 is negative"
  return s;
}

void add_edit_options(po::options_description& desc, EditFlags& e) {
  desc.add_options()
      ("edits", po::value(&e.file), "interventions at hook points, a JSON file (docs/interventions.md)")
      ("steer", po::value(&e.steer)->composing(), "add a vector: 'HOOK=FILE.h5:/dataset*SCALE' or 'HOOK=FILE.npy*SCALE' (repeatable)");
}

void add_sae_options(po::options_description& desc, SaeFlags& f, CaptureSettings* capture) {
  if (capture)
    desc.add_options()("sae-sparse", po::value(&capture->sae_sparse),
                       "store each *.hook_sae_acts_post row sparse (CSR under /sparse): nonzero, or top:K (its K largest)");
  desc.add_options()
      ("sae", po::value(&f.dirs)->composing(), "a SAELens SAE or transcoder folder (cfg.json, sae_weights.safetensors): adds <hook>.hook_sae_* points (repeatable; docs/sae.md)")
      ("sae-splice", po::bool_switch(&f.splice), "replace each --sae hook's value with the SAE's reconstruction in every forward")
      ("sae-error-term", po::bool_switch(&f.error_term), "with --sae-splice: add the SAE's error back (the forward unchanged up to rounding)");
}

void attach_saes(Session& s, const SaeFlags& f) {
  if ((f.splice || f.error_term) && f.dirs.empty()) bad_input("--sae-splice and --sae-error-term need --sae");
  if (f.error_term && !f.splice) bad_input("--sae-error-term needs --sae-splice");
  for (const auto& d : f.dirs) as_flag("--sae", [&] { s.attach_sae(Sae::load(d), f.splice, f.error_term); });
}

std::vector<EditSpec> edit_specs(const EditFlags& e) {
  std::vector<EditSpec> out;
  if (!e.file.empty()) as_flag("--edits", [&] { out = parse_edits_file(e.file); });
  for (const auto& s : e.steer)
    as_flag("--steer", [&] {
      out.push_back(parse_steer(s));
      out.back().where = "--steer '" + s + "'";  // later messages (the vector's file, the hook) name the flag
    });
  return out;
}

}  // namespace sonde::cli
