#include "checkpoint.h"

#include "process.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace sonde::test {

void make_tiny_model(const std::filesystem::path& dir, const std::string& arch) {
  const Outcome o = run({"make-model", "--arch", arch, "--preset", "tiny", "--out", dir.string()});
  if (o.exit_code != 0) {
    ADD_FAILURE() << "make-model failed: " << o.describe();
    throw std::runtime_error("make-model failed");
  }
}

std::string read_text(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

nlohmann::json read_json(const std::filesystem::path& file) { return nlohmann::json::parse(read_text(file)); }

SafetensorsFile read_safetensors(const std::filesystem::path& file) {
  const std::string bytes = read_text(file);
  if (bytes.size() < 8) throw std::runtime_error(file.string() + " is too short");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (n > bytes.size() - 8) throw std::runtime_error(file.string() + ": header length past the end");
  SafetensorsFile st;
  st.header = nlohmann::json::parse(bytes.substr(8, n));
  st.data = bytes.substr(8 + n);
  return st;
}

void write_safetensors(const std::filesystem::path& file, const SafetensorsFile& st) {
  std::string text = st.header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string bytes(8, '\0');
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i, n >>= 8) bytes[static_cast<std::size_t>(i)] = static_cast<char>(n & 0xff);
  write_text(file, bytes + text + st.data);
}

void edit_safetensors(const std::filesystem::path& file, const std::function<void(nlohmann::json&)>& edit) {
  SafetensorsFile st = read_safetensors(file);
  edit(st.header);
  write_safetensors(file, st);
}

}  // namespace sonde::test
