// The "features" sink (--feature-stats FILE): per-feature dashboard statistics of every captured
// SAE feature activation hook (*.hook_sae_acts_post; feature_state.h), in a small HDF5 file
// (feature_file.h). Like the stats sink, a committed run (sonde batch) rewrites the file at each
// checkpoint and a resume continues from it, so a resumed run's file equals an uninterrupted one's.
// A prompt's rows are kept until end_prompt, which brings the sequence the contexts are cut from.
// A data-parallel run's parts are merged into one file (join_feature_files) equal to one
// process's, but for the sums' rounding and top_row, which numbers rows as the joined --acts does.
#include "feature_file.h"

#include <sonde/error.h>
#include <sonde/plugin.h>
#include <sonde/sae.h>
#include <sonde/sink.h>
#include <sonde/tensor.h>

#include <nlohmann/json.hpp>

#include <filesystem>

namespace sonde::feature_stats {
namespace {

bool feature_hook(const HookPoint& h) { return h.row_shape.size() == 1 && sae_acts_post_hook(h.name); }

// Per captured acts_post hook, the log10 feature densities its SAE was saved with (SAELens's
// sparsity.safetensors), found through the run's record of its SAEs (run_config_json's saes).
std::map<std::string, std::vector<double>> sae_sparsity(const RunMetadata& meta, const std::vector<HookPoint>& hooks) {
  std::map<std::string, std::vector<double>> out;
  const auto it = meta.strings.find("run_config_json");
  if (it == meta.strings.end()) return out;
  const auto config = nlohmann::json::parse(it->second, nullptr, false);
  if (!config.is_object() || !config.contains("saes")) return out;
  for (const auto& sae : config["saes"])
    for (const auto& h : hooks)
      if (h.name == sae.value("hook", std::string()) + ".hook_sae_acts_post") {
        const Tensor t = read_sae_sparsity(sae.value("path", sae.value("folder", std::string())), h.row_shape.at(0));
        if (!t.empty()) out[h.name].assign(t.data<float>(), t.data<float>() + t.shape().numel());
      }
  return out;
}

}  // namespace

class FeatureStatsSink final : public Sink {
 public:
  CommitMark open(const SinkOptions& o, const RunMetadata& meta, const std::vector<HookPoint>& hooks) override {
    if (o.path.empty()) bad_input("the feature statistics sink needs a file path");
    std::vector<HookPoint> mine;
    for (const auto& h : hooks)
      if (feature_hook(h)) mine.push_back(h);
    if (mine.empty())
      bad_input("{}: feature statistics need an SAE's hook_sae_acts_post in --hooks (e.g. '*.hook_sae_acts_post')", o.path);
    path_ = o.path;
    durable_ = o.durable;
    const auto sha = meta.strings.count("run_config_sha256") ? meta.strings.at("run_config_sha256") : "";
    if (o.resume && std::filesystem::exists(o.path)) {
      state_ = read_feature_file(o.path, mine, sha);
    } else {
      if (std::filesystem::exists(o.path) && !o.overwrite) bad_input("{} already exists (use --overwrite to replace it)", o.path);
      for (const auto& h : mine) state_.hooks.emplace(h.name, FeatureState(h.row_shape[0]));
    }
    state_.meta = meta;
    state_.complete = false;
    state_.sae_sparsity = sae_sparsity(meta, mine);
    if (o.streaming) write_feature_file(path_, state_, durable_);
    return state_.mark;
  }
  bool wants(const std::string& hook) const override { return state_.hooks.count(hook) > 0; }
  void write(const TapRecord& rec, const TensorView& rows) override {
    if (!state_.hooks.count(rec.hook)) return;
    pending_[rec.hook] = Tensor::copy_of(rows.dtype == DType::f32 ? rows : to_f32(rows).view());
  }
  void add_rows(const std::vector<RowRecord>& rows) override { rows_.insert(rows_.end(), rows.begin(), rows.end()); }
  void add_steps(const std::vector<StepRecord>&) override {}
  void end_prompt(const PromptRecord& p) override {
    std::vector<std::int32_t> pos, step;
    for (const auto& r : rows_) {
      pos.push_back(r.pos);
      step.push_back(r.step);
    }
    for (auto& [name, acts] : pending_) {
      FeatureState& s = state_.hooks.at(name);
      const std::int64_t n = acts.shape()[0];
      if (n != static_cast<std::int64_t>(rows_.size()))
        runtime_error("feature stats: hook {} got {} rows for a prompt of {}", name, n, rows_.size());
      s.add(acts.data<float>(), n, p.prompt_idx, pos, step, p.token_ids);
    }
    state_.prompt_idx.push_back(p.prompt_idx);
    state_.prompt_id.push_back(p.id);
    pending_.clear();
    rows_.clear();
  }
  void write_array(const std::string&, const TensorView&) override {}
  void checkpoint(const CommitMark& mark) override {
    state_.mark = mark;
    write_feature_file(path_, state_, durable_);
  }
  void flush() override {}
  void close() override {
    state_.complete = true;
    write_feature_file(path_, state_, durable_);
  }
  void join(const std::vector<std::string>& parts, const std::string& path, const RunMetadata& meta) override {
    const auto sha = meta.strings.count("run_config_sha256") ? meta.strings.at("run_config_sha256") : "";
    FileState all = join_feature_files(parts, sha);
    all.meta = meta;
    all.meta.ints["data_parallel_parts"] = static_cast<std::int64_t>(parts.size());
    write_feature_file(path, all, true);
  }
  bool joins() const override { return true; }

 private:
  std::string path_;
  bool durable_ = false;
  FileState state_;
  std::map<std::string, Tensor> pending_;  // this prompt's rows per hook
  std::vector<RowRecord> rows_;
};

}  // namespace sonde::feature_stats

SONDE_PLUGIN(sonde::feature_stats::FeatureStatsSink, "sink", "features", "0.1.0", "", 0)
