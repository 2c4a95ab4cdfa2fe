// Model directory resolution (local paths and the local Hugging Face cache) and SHA-256.
#include <sonde/error.h>
#include <sonde/model_dir.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <vector>

namespace sonde {

namespace fs = std::filesystem;

namespace {

// ---- Hugging Face cache ------------------------------------------------------------------

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// The same precedence as huggingface_hub: HF_HUB_CACHE, then HF_HOME/hub, then the XDG cache.
fs::path hf_hub_cache() {
  if (auto v = env("HF_HUB_CACHE")) return *v;
  if (auto v = env("HF_HOME")) return fs::path(*v) / "hub";
  if (auto v = env("XDG_CACHE_HOME")) return fs::path(*v) / "huggingface" / "hub";
  return fs::path(env("HOME").value_or("/")) / ".cache" / "huggingface" / "hub";
}

bool repo_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

// "org/name" as the Hub spells repository ids: two non-empty parts, no path tricks.
bool looks_like_repo_id(const std::string& s) {
  const auto slash = s.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == s.size()) return false;
  if (s.find('/', slash + 1) != std::string::npos) return false;
  const std::string org = s.substr(0, slash), name = s.substr(slash + 1);
  for (const auto& part : {org, name})
    if (part == "." || part == ".." || !std::all_of(part.begin(), part.end(), repo_name_char)) return false;
  return true;
}

std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
  return s;
}

// snapshots/<refs/main> when present, else the only or the most recently written snapshot.
std::optional<fs::path> find_snapshot(const fs::path& repo) {
  std::error_code ec;
  const fs::path snapshots = repo / "snapshots";
  if (std::ifstream ref{repo / "refs" / "main"}) {
    std::string rev;
    std::getline(ref, rev);
    rev = trimmed(rev);
    if (!rev.empty() && rev.find('/') == std::string::npos && fs::is_directory(snapshots / rev, ec))
      return snapshots / rev;
  }
  std::optional<fs::path> best;
  fs::file_time_type best_time{};
  for (const auto& e : fs::directory_iterator(snapshots, ec)) {
    if (!e.is_directory(ec)) continue;
    const auto t = e.last_write_time(ec);
    if (!best || t > best_time) best = e.path(), best_time = t;
  }
  return best;
}

// ---- SHA-256 (FIPS 180-4) -------------------------------------------------------------------

constexpr std::array<std::uint32_t, 64> kRound = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::uint32_t rotr(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void update(const unsigned char* p, std::size_t n) {
    total_ += n;
    while (n > 0) {
      const std::size_t take = std::min(n, block_.size() - used_);
      std::memcpy(block_.data() + used_, p, take);
      used_ += take, p += take, n -= take;
      if (used_ == block_.size()) compress(), used_ = 0;
    }
  }

  // Pads with 0x80, zeros and the 64-bit big-endian bit length (FIPS 180-4 §5.1.1).
  std::string hex() {
    const std::uint64_t bits = total_ * 8;
    const unsigned char one = 0x80, zero = 0;
    update(&one, 1);
    while (used_ != 56) update(&zero, 1);
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(bits >> (56 - 8 * i));
    update(len, 8);
    std::string out;
    for (std::uint32_t w : h_) out += fmt::format("{:08x}", w);
    return out;
  }

 private:
  void compress() {
    std::array<std::uint32_t, 64> w{};
    for (int t = 0; t < 16; ++t)
      w[t] = std::uint32_t(block_[4 * t]) << 24 | std::uint32_t(block_[4 * t + 1]) << 16 |
             std::uint32_t(block_[4 * t + 2]) << 8 | std::uint32_t(block_[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      const std::uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const std::uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    auto [a, b, c, d, e, f, g, h] = h_;
    for (int t = 0; t < 64; ++t) {
      const std::uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    const std::array<std::uint32_t, 8> add = {a, b, c, d, e, f, g, h};
    for (int i = 0; i < 8; ++i) h_[i] += add[i];
  }

  // Initial hash value H(0): FIPS 180-4 §5.3.3.
  std::array<std::uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                     0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::array<unsigned char, 64> block_{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

}  // namespace

fs::path resolve_model_dir(const std::string& model) {
  std::error_code ec;
  if (model.empty()) bad_input("model: the path is empty: expected a model directory or an org/name from the Hugging Face cache");
  if (fs::is_directory(model, ec)) return fs::absolute(model).lexically_normal();
  if (fs::exists(model, ec))
    bad_input("model '{}': is a file, not a model directory (give the folder that holds config.json)", model);
  if (!looks_like_repo_id(model))
    bad_input("model '{}': no such directory ({} does not exist; an org/name would be looked up in the Hugging Face cache)",
              model, fs::absolute(model).string());
  const fs::path cache = hf_hub_cache();
  const std::string org = model.substr(0, model.find('/')), name = model.substr(model.find('/') + 1);
  const fs::path repo = cache / ("models--" + org + "--" + name);
  if (auto snap = find_snapshot(repo)) return fs::absolute(*snap);
  bad_input(
      "model '{}' not found: searched the directory {} and the Hugging Face cache {} (no snapshot under {}); "
      "sonde never downloads: fetch it first, e.g. `huggingface-cli download {}`",
      model, fs::absolute(model).string(), cache.string(), (repo / "snapshots").string(), model);
}

std::string sha256_hex(const void* data, std::size_t n) {
  Sha256 s;
  s.update(static_cast<const unsigned char*>(data), n);
  return s.hex();
}

std::string sha256_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) bad_input("{}: cannot open for hashing: {}", file.string(), std::strerror(errno));
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(reinterpret_cast<const unsigned char*>(buf.data()), static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) runtime_error("{}: read error while hashing", file.string());
  return s.hex();
}

}  // namespace sonde
