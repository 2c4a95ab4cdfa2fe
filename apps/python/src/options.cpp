#include "options.h"

#include <sonde/edit_spec.h>
#include <sonde/error.h>
#include <sonde/run_schema.h>

namespace sonde::py {
namespace {
using nlohmann::json;

Request parse_request(const json& j, std::size_t index) {
  Request r;
  r.where = "prompt " + std::to_string(index);
  json settings = json::object();
  for (const auto& [key, value] : j.items()) {
    if (key == "id") {
      r.id = value.get<std::string>();
    } else if (key == "text") {
      r.text = value.get<std::string>();
    } else if (key == "ids") {
      r.ids = value.get<std::vector<std::int32_t>>();
      if (r.ids.empty()) bad_input("{}: ids is empty", r.where);
    } else if (key == "completion") {
      r.completion = value.get<std::string>();
    } else if (key == "completion_ids") {
      r.completion_ids = value.get<std::vector<std::int32_t>>();
    } else if (key == "messages") {
      for (const auto& m : value) r.messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
    } else {
      settings[key] = value;
    }
  }
  r.settings = GenerationSettings::from_json(settings);
  return r;
}

CaptureSettings parse_capture(const json& j) {
  CaptureSettings c;
  c.hooks = j.value("hooks", "");
  c.positions = j.value("positions", "all");
  c.diffusion_capture = j.value("diffusion_capture", "commit");
  c.storage = j.value("storage", "f32");
  c.compress = j.value("compress", false);
  c.sae_sparse = j.value("sae_sparse", "");  // "", "nonzero" or "top:K" (docs/sae.md)
  c.check();
  return c;
}

}  // namespace

CallSpec parse_call(const std::string& requests_json, const std::string& options_json) {
  CallSpec c;
  try {
    const json reqs = json::parse(requests_json);
    for (std::size_t i = 0; i < reqs.size(); ++i) c.requests.push_back(parse_request(reqs[i], i));
    const json o = json::parse(options_json);
    // The run layer's table (run_schema.h) for the run's kind, plus this layer's own keys; the
    // table's check covers the keys of capture, score, lens and defaults too.
    const RunKind kind = run_kind_from_name(o.is_object() ? o.value("kind", "generate") : "generate");
    check_run_options(o, kind, {"memory", "stream", "progress", "stop_mid_batch"}, "options");
    RunOptions& r = c.options;
    r.kind = kind;
    if (o.contains("score")) {
      const json& sc = o["score"];
      r.score = ScoreSettings{sc.value("samples", std::int64_t{32}), sc.value("coupled", false), sc.value("record_masks", false)};
    }
    if (o.contains("lens")) {
      const json& le = o["lens"];
      r.lens = LensSettings{le.value("top_k", std::int64_t{5}), le.value("diffusion", false)};
    }
    r.command = o.value("command", "python");
    r.defaults = GenerationSettings::from_json(o.value("defaults", json::object()));
    r.defaults.check();
    r.seed = o.value("seed", std::uint64_t{0});
    r.batch_size = o.value("batch_size", std::int64_t{0});
    r.use_kv_cache = o.value("use_kv_cache", true);
    r.capture = parse_capture(o.value("capture", json::object()));
    for (const auto& s : o.value("sinks", json::array()))
      r.sinks.push_back(SinkSpec{s.value("name", "hdf5"), s.at("path").get<std::string>(), s.value("overwrite", false), nullptr});
    r.results_path = o.value("results_path", "");
    r.resume = o.value("resume", false);
    r.overwrite = o.value("overwrite", false);
    r.durable = o.value("durable", false);
    r.record_history = o.value("record_history", false);
    r.keep_results = o.value("keep_results", true);
    r.checkpoint_every = o.value("checkpoint_every", std::int64_t{64});
    r.checkpoint_seconds = o.value("checkpoint_seconds", 60.0);
    c.skip_bad = o.value("skip_bad", false);
    r.skip_bad = c.skip_bad;
    c.dataset = o.value("dataset", "");
    r.dataset_path = c.dataset;
    c.memory = o.value("memory", false);
    c.stream = o.value("stream", false);
    c.progress = o.value("progress", false);
    c.stop_mid_batch = o.value("stop_mid_batch", true);
    if (o.contains("edits")) r.edits = parse_edits_json(o.at("edits"), "edits");
  } catch (const json::exception& e) {
    bad_input("python call: {}", e.what());
  }
  return c;
}

}  // namespace sonde::py
