// activations_file: a request's captured rows written on the server, under --files-dir, as a
// one-shot sonde.acts/1 file (docs/hdf5-layout.md) like `sonde generate --out` writes: written as
// FILE.partial and renamed when complete, locked while written, never over an existing file.
#include "acts_file.h"

#include <sonde/error.h>
#include <sonde/model_dir.h>
#include <sonde/output_lock.h>
#include <sonde/registry.h>
#include <sonde/request.h>
#include <sonde/run_metadata.h>
#include <sonde/tokenizer.h>

#include <filesystem>

namespace sonde::serve {
namespace acts_file_impl {

namespace fs = std::filesystem;

RunMetadata file_metadata(Service& svc, const ParsedRequest& req) {
  nlohmann::json edits = nlohmann::json::array();
  for (const auto& e : req.edits) edits.push_back(e.to_json());
  const nlohmann::json config{{"command", "serve"},
                              {"endpoint", req.endpoint == Endpoint::Activations ? "activations" : "generation"},
                              {"capture", req.capture.to_json()},
                              {"edits", edits}};
  // The run layer's keys (sonde_version, tokenizer_sha256, compute, edits_json, ...), not a copy.
  return output_metadata(*svc.view, config, req.capture.storage);
}

}  // namespace acts_file_impl

void write_activations_file(Service& svc, const ParsedRequest& req, const Submitted& sub) {
  namespace fs = std::filesystem;
  const std::string& path = req.activations_file;
  if (!fs::is_directory(fs::path(path).parent_path()))
    throw ApiError(400, "activations_file", "activations_file: its directory does not exist under --files-dir");
  std::unique_ptr<OutputLock> lock;
  try {
    lock = std::make_unique<OutputLock>(path);
  } catch (const Error& e) {
    throw ApiError(409, "activations_file", std::string("activations_file: ") + e.what());
  }
  if (fs::exists(path)) throw ApiError(400, "activations_file", "activations_file: " + path + " exists; name a new file");
  auto sink = PluginRegistry::instance().sink("hdf5");
  SinkOptions so;
  so.path = path + ".partial";
  so.overwrite = true;
  so.storage = req.capture.storage_dtype();
  so.diffusion = svc.traits.diffusion && req.endpoint != Endpoint::Activations;
  sink->open(so, acts_file_impl::file_metadata(svc, req), sub.capture.hooks);
  const Tokenizer* tok = svc.session.tokenizer();
  for (std::size_t i = 0; i < sub.jobs.size(); ++i) {
    const Outcome& out = sub.jobs[i]->out;
    CapturedPrompt cap = out.captured;
    for (auto& r : cap.rows) r.prompt_idx = static_cast<std::int64_t>(i);
    for (auto& st : cap.steps) st.prompt_idx = static_cast<std::int64_t>(i);
    PromptRecord rec;
    rec.prompt_idx = static_cast<std::int64_t>(i);
    rec.id = std::to_string(i);
    rec.text = sub.prompt_texts[i];
    rec.completion = completion_text(tok, svc.session.info(), out.tokens, sub.stops).value_or("");
    rec.finish_reason = req.endpoint == Endpoint::Activations ? "forward" : out.finish_reason;
    rec.token_ids = sub.prompt_ids[i];
    rec.token_ids.insert(rec.token_ids.end(), out.tokens.begin(), out.tokens.end());
    write_captured(*sink, sub.capture, cap, rec);
  }
  sink->close();
  fs::rename(so.path, path);
}

}  // namespace sonde::serve
