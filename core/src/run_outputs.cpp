// A run's outputs: its sinks, opened by registry name, and for a committed run the results file,
// checkpointed in step with them (run_internal.h). A resumed run continues after the mark the
// sinks recorded (or, with no sink, after the results file's last complete line).
#include <sonde/error.h>
#include <sonde/model_dir.h>
#include <sonde/registry.h>
#include <sonde/request.h>

#include "run_internal.h"

#include <sonde/run_metadata.h>
#include <sonde/run_schema.h>

#include <algorithm>
#include <filesystem>

namespace sonde::run_detail {
namespace fs = std::filesystem;


namespace {

// The diffusion decodings the run's requests resolve to, each once, in order of first use: a
// dump says which mode produced it (exact or block) and with what.
nlohmann::json decoding(const RunModel& s, const std::vector<PreparedRequest>& prepared) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : prepared) {
    const DiffusionOptions d = resolve_diffusion(p.settings, s.config(), s.info());
    if (d.loop == DiffusionLoop::SemiArRemasking) {  // LLaDA's generate(): its own names
      nlohmann::json e{{"loop", "llada_generate"}, {"diffusion_mode", diffusion_mode_name(d.mode)}, {"steps", d.steps},
                       {"max_new_tokens", d.max_new_tokens}, {"block_length", d.block_length},
                       {"remasking", remasking_name(d.remasking)}, {"cfg_scale", d.cfg_scale},
                       {"temperature", d.sampling.temperature}, {"cache", diffusion_cache_name(d.mode)}};
      if (d.remasking_threshold) e["threshold"] = *d.remasking_threshold;
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
      continue;
    }
    if (d.loop == DiffusionLoop::BlockDiffusion) {  // Fast-dLLM v2's batch_sample: its own names
      nlohmann::json e{{"loop", "fast_dllm_v2_batch_sample"}, {"diffusion_mode", "block_diffusion"}, {"block_size", d.block_size},
                       {"small_block_size", d.small_block_size}, {"threshold", d.threshold},
                       {"max_new_tokens", d.max_new_tokens}, {"stop_token", d.stop_id}, {"cache", "blocks"}};
      if (d.sampling.temperature > 0) {  // sampled: what it drew with (greedy files keep their old keys)
        e["temperature"] = d.sampling.temperature;
        if (d.sampling.top_p) e["top_p"] = *d.sampling.top_p;
        if (d.sampling.top_k) e["top_k"] = *d.sampling.top_k;
      }
      if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
      continue;
    }
    nlohmann::json e{{"diffusion_mode", diffusion_mode_name(d.mode)}, {"alg", diffusion_alg_name(d.sampling.alg)},
                     {"max_new_tokens", d.max_new_tokens}, {"cache", diffusion_cache_name(d.mode)}};
    if (d.mode != DiffusionMode::Exact) e["block_size"] = d.block_size;
    if (d.sampling.alg == DiffusionAlg::ConfidenceThreshold) e["threshold"] = d.threshold;
    if (d.tokens_per_step > 0) e["tokens_per_step"] = d.tokens_per_step;
    if (d.refresh_every > 0) e["refresh_every"] = d.refresh_every;
    if (d.sampling.alg != DiffusionAlg::ConfidenceThreshold && d.tokens_per_step == 0) e["steps"] = d.steps;
    // Sampling that differs from greedy, wherever it came from (flag, generation_config.json):
    // a variant's published defaults show in the file that they ran.
    if (d.sampling.temperature > 0) e["temperature"] = d.sampling.temperature;
    if (d.sampling.top_p) e["top_p"] = *d.sampling.top_p;
    if (d.sampling.top_k) e["top_k"] = *d.sampling.top_k;
    if (d.eos_penalty > 0) e["eos_penalty"] = d.eos_penalty;
    if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
  }
  return out;
}

}  // namespace

nlohmann::json run_config(const RunModel& s, const RunOptions& o, const std::vector<PreparedRequest>& prepared) {
  const auto& raw = s.config().raw_json;
  nlohmann::json j{{"command", o.command},
                   {"model_config_sha256", sha256_hex(raw.data(), raw.size())},
                   {"backend", s.backend_name()},
                   {"kind", run_kind_name(o.kind)},
                   {"seed", o.seed},
                   {"batch_size", o.batch_size},
                   {"defaults", o.defaults.to_json()},
                   {"capture", o.capture.to_json()}};
  if (!o.edits.empty()) {
    nlohmann::json edits = nlohmann::json::array();
    for (const auto& e : o.edits) edits.push_back(e.to_json());
    j["edits"] = edits;
  }
  if (const auto saes = s.saes(); !saes.empty()) j["saes"] = saes_json(saes);
  if (o.kind == RunKind::Generate && s.info().decoding == DecodingKind::MaskedDiffusion) j["decoding"] = decoding(s, prepared);
  if (o.kind == RunKind::Forward) j["logits"] = o.forward_logits ? "all" : "none";
  if (o.kind == RunKind::Score && s.info().diffusion())
    j["score"] = {{"samples", o.score.samples}, {"coupled", o.score.coupled}, {"record_masks", o.score.record_masks}};
  if (o.kind == RunKind::Lens) j["lens"] = {{"top_k", o.lens.top_k}, {"diffusion", o.lens.diffusion}};
  // Only when not the default, so an f32 run's config (and its digest) is what it was before --compute.
  if (s.compute() != "f32") j["compute"] = s.compute();
  if (!o.dataset_path.empty()) {
    j["input_sha256"] = sha256_file(o.dataset_path);
  } else {  // a one-shot file is the only record of what it ran
    nlohmann::json prompts = nlohmann::json::array();
    for (const auto& p : prepared) prompts.push_back(p.ids);
    j["prompts"] = prompts;
  }
  return j;
}

RunMetadata run_metadata(const RunModel& s, const nlohmann::json& run_config, const std::string& storage_dtype) {
  const std::string run_config_json = run_config.dump();
  RunMetadata m;
  const auto dir = s.model_dir();
  std::string tokenizer_sha;
  for (const char* f : {"tokenizer.json", "vocab.json"})
    if (fs::exists(dir / f)) {
      tokenizer_sha = sha256_file(dir / f);
      break;
    }
  m.strings = {{"sonde_version", SONDE_VERSION},
               {"model_arch", s.info().arch},
               {"model_path", fs::absolute(dir).string()},
               {"config_json", s.config().raw_json},
               {"run_config_json", run_config_json},
               {"run_config_sha256", sha256_hex(run_config_json.data(), run_config_json.size())},
               {"tokenizer_sha256", tokenizer_sha},
               {"backend", s.backend_name()},
               {"compute_dtype", "f32"},
               {"compute", s.compute()},
               {"storage_dtype", storage_dtype},
               {"weight_processing", "none"}};
  m.ints = {{"prediction_shift", s.info().prediction_shift}, {"rank", 0}, {"world_size", 1}};
  // The edits a run applied, on every output (run_config_json holds them too, with the rest).
  if (run_config.contains("edits")) m.strings["edits_json"] = run_config["edits"].dump();
  // The SAEs a run attached (sae.h saes_json: path, hooks, architecture, widths, weights sha256,
  // splice, error term), on every output, so a file says which SAE made its features.
  if (run_config.contains("saes")) m.strings["saes_json"] = run_config["saes"].dump();
  // A forward's file says whether /logits is there by design ("none": hooks only, no LM head).
  if (run_config.contains("logits")) m.strings["logits"] = run_config["logits"].get<std::string>();
  // A diffusion run's decoding as root attributes too, when its requests share one ("mixed"
  // otherwise: run_config_json's "decoding" lists them).
  const auto& config = run_config;
  if (config.is_object() && config.contains("decoding") && !config["decoding"].empty()) {
    const auto& d = config["decoding"];
    const auto& e = d.front();
    m.strings["diffusion_mode"] = d.size() == 1 ? e["diffusion_mode"].get<std::string>() : "mixed";
    m.strings["diffusion_cache"] = d.size() == 1 ? e["cache"].get<std::string>() : "mixed";
    if (d.size() == 1) {
      if (e.contains("block_length")) {  // LLaDA's generate(): its own names
        m.ints["block_length"] = e["block_length"].get<std::int64_t>();
        m.strings["remasking"] = e["remasking"].get<std::string>();
        m.strings["cfg_scale"] = e["cfg_scale"].dump();
      } else {
        m.ints["block_size"] = e.value("block_size", e["max_new_tokens"].get<std::int64_t>());
      }
      if (e.contains("small_block_size")) m.ints["small_block_size"] = e["small_block_size"].get<std::int64_t>();
      if (e.contains("threshold")) m.strings["threshold"] = e["threshold"].dump();
      if (e.contains("tokens_per_step")) m.ints["tokens_per_step"] = e["tokens_per_step"].get<std::int64_t>();
      if (e.contains("refresh_every")) m.ints["refresh_every"] = e["refresh_every"].get<std::int64_t>();
    }
  }
  return m;
}

Outputs::Outputs(const RunOptions& o, const CaptureSpec& spec, const RunMetadata& meta,
                 bool diffusion) {
  try {
    open(o, spec, meta, diffusion);
  } catch (...) {
    drop();
    throw;
  }
}

void Outputs::open(const RunOptions& o, const CaptureSpec& spec, const RunMetadata& meta, bool diffusion) {
  const bool committed = !o.results_path.empty();
  if (committed) locks_.push_back(std::make_unique<OutputLock>(o.results_path));
  for (const auto& want : o.sinks)
    if (!want.path.empty()) locks_.push_back(std::make_unique<OutputLock>(want.path));
  // Sinks that cannot rewind are opened first and set the mark the run continues from; those that
  // can are trimmed to it (checkpoint() writes them first, so a kill between two sinks' checkpoints
  // leaves only sinks that can rewind ahead).
  std::vector<std::pair<const SinkSpec*, std::shared_ptr<Sink>>> order;
  for (const auto& want : o.sinks) order.emplace_back(&want, want.sink ? want.sink : PluginRegistry::instance().sink(want.name));
  std::stable_partition(order.begin(), order.end(), [](const auto& p) { return !p.second->rewinds(); });
  const SinkSpec* first = nullptr;
  for (auto& [want, sink] : order) {
    SinkOptions so;
    so.path = want->path;
    so.storage = o.capture.storage_dtype();
    so.compress = o.capture.compress;
    so.sparse_top_k = o.capture.sparse_top_k();
    so.overwrite = want->overwrite;
    so.streaming = committed;
    so.resume = committed && o.resume && fs::exists(want->path);
    so.durable = o.durable;
    so.resume_complete = o.resume_complete;
    so.diffusion = diffusion;
    if (first && so.resume && sink->rewinds()) so.resume_at = mark_;
    if (!committed && !want->path.empty()) {
      if (fs::exists(want->path) && !want->overwrite)
        bad_input("{} already exists; refusing to overwrite it (ask for overwrite to replace it)", want->path);
      so.path = want->path + ".partial";
      so.overwrite = true;  // a partial file is what a failed or killed run left
      partials_.push_back({so.path, want->path});
    }
    const CommitMark m = sink->open(so, meta, spec.hooks);
    if (first && (m.prompts != mark_.prompts || m.results_bytes != mark_.results_bytes))
      runtime_error("resume: {} committed {} prompts but {} committed {}", want->path, m.prompts, first->path,
                    mark_.prompts);
    if (!first) {
      mark_ = m;
      first = want;
    }
    std::vector<HookPoint> wanted;
    for (const auto& h : spec.hooks)
      if (sink->wants(h.name)) wanted.push_back(h);
    wanted_.push_back(std::move(wanted));
    sinks_.push_back(std::move(sink));
  }
  if (!committed) return;
  const bool keep = o.resume && fs::exists(o.results_path);
  if (sinks_.empty() && keep) {  // without a sink the results file is its own mark
    const auto m = complete_lines(o.results_path);
    mark_ = CommitMark{m.lines, 0, m.bytes};
  }
  if (o.resume && !keep && mark_.prompts > 0)
    runtime_error("resume: {} is missing but {} committed {} prompts", o.results_path, first->path, mark_.prompts);
  results_ = std::make_unique<ResultsFile>(o.results_path, keep, keep ? mark_.results_bytes : 0, o.durable);
}

Outputs::~Outputs() { drop(); }

void Outputs::drop() noexcept {
  sinks_.clear();  // closes their files before the partial ones are removed
  std::error_code ec;
  for (const auto& p : partials_) fs::remove(p.partial, ec);
  partials_.clear();
}

void Outputs::write(const CapturedPrompt& cap, const PromptRecord& rec, const nlohmann::json* line) {
  for (std::size_t i = 0; i < sinks_.size(); ++i) write_captured(*sinks_[i], wanted_[i], cap, rec);
  if (results_ && line) results_->append(line->dump());
}

void Outputs::checkpoint(std::int64_t prompts, std::int64_t rows) {
  mark_.prompts = prompts;
  mark_.rows = rows;
  if (results_) mark_.results_bytes = results_->commit();
  for (auto& s : sinks_)  // those that can rewind first (open())
    if (s->rewinds()) s->checkpoint(mark_);
  for (auto& s : sinks_)
    if (!s->rewinds()) s->checkpoint(mark_);
}

void Outputs::close() {
  for (auto& s : sinks_) s->close();
  sinks_.clear();
  for (const auto& p : partials_) {
    std::error_code ec;
    if (!fs::exists(p.partial, ec)) continue;  // a sink that keeps nothing at its path
    fs::rename(p.partial, p.path, ec);
    if (ec) runtime_error("cannot rename {} to {}: {}", p.partial, p.path, ec.message());
  }
  partials_.clear();
}

void Outputs::abandon() { sinks_.clear(); }

}  // namespace sonde::run_detail

namespace sonde {

RunMetadata output_metadata(const RunModel& model, const nlohmann::json& run_config, const std::string& storage_dtype) {
  return run_detail::run_metadata(model, run_config, storage_dtype);
}

void check_outputs(const RunOptions& o) {
  if (o.resume && o.overwrite) bad_setting("resume", "resume and overwrite exclude each other");
  if (o.resume) return;  // what exists is continued (and checked against the run when opened)
  if (!o.results_path.empty() && !o.overwrite && std::filesystem::exists(o.results_path))
    bad_setting("output", "{} exists (resume to continue that run, or overwrite to replace it)", o.results_path);
  for (const auto& s : o.sinks)  // an empty directory (made for a data-parallel run's parts) holds nothing to lose
    if (!s.path.empty() && !s.overwrite && std::filesystem::exists(s.path) &&
        !(std::filesystem::is_directory(s.path) && std::filesystem::is_empty(s.path)))
      bad_setting(s.name.c_str(), "{} exists (resume to continue that run, or overwrite to replace it)", s.path);
}

}  // namespace sonde
