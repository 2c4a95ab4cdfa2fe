#pragma once
// Checkpoints for the tests: fresh `sonde make-model` output, and in-place edits of its
// model.safetensors header (u64 little-endian length + JSON) and config.json.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

namespace sonde::test {

// `sonde make-model --arch <arch> --preset tiny --out <dir>`; fails the test (ADD_FAILURE) and
// throws if it does not exit 0.
void make_tiny_model(const std::filesystem::path& dir, const std::string& arch = "qwen2");

struct SafetensorsFile {
  nlohmann::json header;  // the parsed JSON header
  std::string data;       // the bytes after the header
};

SafetensorsFile read_safetensors(const std::filesystem::path& file);
// Writes the header (padded with spaces to a multiple of 8, as the format recommends) and data.
void write_safetensors(const std::filesystem::path& file, const SafetensorsFile& st);
// Reads, lets `edit` change the header, writes back.
void edit_safetensors(const std::filesystem::path& file, const std::function<void(nlohmann::json&)>& edit);

nlohmann::json read_json(const std::filesystem::path& file);
void write_text(const std::filesystem::path& file, const std::string& text);
std::string read_text(const std::filesystem::path& file);

}  // namespace sonde::test
