#include "run_metadata.h"

#include <sonde/model_dir.h>

namespace sonde::cli {

RunMetadata run_metadata(Session& session, const std::string& run_config_json, const std::string& storage_dtype) {
  RunMetadata m;
  const auto dir = session.model_dir();
  std::string tokenizer_sha;
  for (const char* f : {"tokenizer.json", "vocab.json"})
    if (std::filesystem::exists(dir / f)) {
      tokenizer_sha = sha256_file(dir / f);
      break;
    }
  m.strings = {{"sonde_version", SONDE_VERSION},
               {"model_arch", session.info().arch},
               {"model_path", std::filesystem::absolute(dir).string()},
               {"config_json", session.config().raw_json},
               {"run_config_json", run_config_json},
               {"run_config_sha256", sha256_hex(run_config_json.data(), run_config_json.size())},
               {"tokenizer_sha256", tokenizer_sha},
               {"backend", session.backend().info().name},
               {"compute_dtype", "f32"},
               {"storage_dtype", storage_dtype},
               {"weight_processing", "none"}};
  m.ints = {{"prediction_shift", session.info().prediction_shift}, {"rank", 0}, {"world_size", 1}};
  return m;
}

}  // namespace sonde::cli
