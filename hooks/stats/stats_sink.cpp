// The "stats" sink: running statistics of every selected hook's rows (running_stats.h) in a small
// HDF5 file (stats_file.h), instead of or beside the activations. A committed run (sonde batch)
// rewrites the file at each checkpoint, so a crash leaves the last checkpoint's state, and a
// resume continues from it; the statistics of a resumed run equal an uninterrupted one's.
#include "stats_file.h"

#include <sonde/error.h>
#include <sonde/plugin.h>
#include <sonde/sink.h>
#include <sonde/tensor.h>

#include <filesystem>

namespace sonde::stats {

class StatsSink final : public Sink {
 public:
  CommitMark open(const SinkOptions& o, const RunMetadata& meta, const std::vector<HookPoint>& hooks) override {
    if (o.path.empty()) bad_input("the stats sink needs a file path");
    if (hooks.empty()) bad_input("{}: statistics need hooks (select some with --hooks)", o.path);
    path_ = o.path;
    durable_ = o.durable;
    const auto sha = meta.strings.count("run_config_sha256") ? meta.strings.at("run_config_sha256") : "";
    if (o.resume && std::filesystem::exists(o.path)) {
      state_ = read_stats_file(o.path, hooks, sha);
    } else {
      if (std::filesystem::exists(o.path) && !o.overwrite) bad_input("{} already exists (use --overwrite to replace it)", o.path);
      for (const auto& h : hooks) {
        std::int64_t n = 1;
        for (auto d : h.row_shape) n *= d;
        state_.hooks.emplace(h.name, HookState{h, RunningStats(n)});
      }
    }
    state_.meta = meta;
    state_.complete = false;
    if (o.streaming) write_stats_file(path_, state_, durable_);  // a resumable empty state from the start
    return state_.mark;
  }
  bool wants(const std::string& hook) const override { return state_.hooks.count(hook) > 0; }
  void write(const TapRecord& rec, const TensorView& rows) override {
    auto it = state_.hooks.find(rec.hook);
    if (it == state_.hooks.end()) return;
    const Tensor dense = rows.contiguous() && rows.dtype == DType::f32 ? Tensor() : to_f32(rows);
    const TensorView& v = dense.empty() ? rows : dense.view();
    const std::int64_t F = it->second.stats.features();
    if (F == 0 || v.numel() % F != 0) runtime_error("stats: hook {} rows {} do not hold {} features", rec.hook, v.shape.str(), F);
    it->second.stats.add(v.as<const float>(), v.numel() / F);
  }
  void add_rows(const std::vector<RowRecord>&) override {}
  void add_steps(const std::vector<StepRecord>&) override {}
  void end_prompt(const PromptRecord&) override {}
  void write_array(const std::string&, const TensorView&) override {}
  void checkpoint(const CommitMark& mark) override {
    state_.mark = mark;
    write_stats_file(path_, state_, durable_);
  }
  void flush() override {}
  void close() override {
    state_.complete = true;
    write_stats_file(path_, state_, durable_);
  }

 private:
  std::string path_;
  bool durable_ = false;
  FileState state_;
};

}  // namespace sonde::stats

SONDE_PLUGIN(sonde::stats::StatsSink, "sink", "stats", "0.1.0", "", 0)
