#pragma once
// Finds a model: a directory, or "org/name" resolved in the local Hugging Face cache
// ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub). Never downloads.
#include <filesystem>
#include <string>

namespace sonde {

std::filesystem::path resolve_model_dir(const std::string& model);

// sha256 of a file's bytes, lowercase hex (used for provenance attributes).
std::string sha256_file(const std::filesystem::path& file);
std::string sha256_hex(const void* data, std::size_t n);

}  // namespace sonde
