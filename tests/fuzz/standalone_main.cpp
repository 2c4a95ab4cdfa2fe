// A small fuzz driver for builds without libFuzzer: deterministic (seeded PRNG) mutation of the
// target's seeds, without coverage feedback. Good enough for a ctest smoke run under the
// sanitizers; use the libFuzzer build (SONDE_FUZZ=ON, clang) for real campaigns.
//
//   <target>_replay [--seconds T] [--iterations N] [--seed S]   mutation loop (default 10000 iterations)
//   <target>_replay FILE...                                    run each file once (reproduce a crash)
//   <target>_replay --write-seeds DIR                          write the seeds, as a libFuzzer corpus
//
// On a crash the current input is written to fuzz-crash.bin in the working directory.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_hooks.h"

namespace {

// ---- crash capture ------------------------------------------------------------------------

const std::string* g_current = nullptr;  // the input being run, for the signal handler

extern "C" void dump_current_input(int sig) {
  if (g_current) {
    const int fd = ::open("fuzz-crash.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, g_current->data(), g_current->size());
      ::close(fd);
    }
    static const char msg[] = "fuzz driver: crashing input written to fuzz-crash.bin\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_crash_handlers() {
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, dump_current_input);
}

void run_one(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
  g_current = nullptr;
}

// ---- mutations ----------------------------------------------------------------------------

using Rng = std::mt19937_64;

std::size_t pick(Rng& rng, std::size_t n) { return n ? static_cast<std::size_t>(rng() % n) : 0; }

constexpr unsigned char kBytes[] = {0, 1, 0x7f, 0x80, 0xff, '"', '[', ']', '{', '}', ',', ':', '-', '0', '9', '.', 'e', '\\', ' '};

// Generic text that tends to matter to parsers of JSON-bearing formats.
constexpr std::string_view kFragments[] = {
    "null", "true", "[]", "{}", "\"\"", "-1", "0", "1e308", "-0", "1.5", "18446744073709551615",
    "18446744073709551616", "9223372036854775807", "4294967296", "[0,0]", "[[[[", "]]]]", "\"\\u0000\"",
    "\"\\ud800\"", ",", ":", "\"__metadata__\":{}", "\"dtype\":\"F32\"", "\"shape\":[]", "\"data_offsets\":[0,4]",
    "\xff\xfe", "{\"a\":", "\"F8_E4M3\"", "\"BF16\"", "[1,1,1,1,1]"};

constexpr std::uint64_t kWords[] = {0, 1, 7, 8, 0x7f, 0xff, 0x7fffffffffffffffULL, 0x8000000000000000ULL,
                                    0xffffffffffffffffULL, 100000000, 100000001};

void mutate_once(std::string& s, const std::vector<std::string>& pool, Rng& rng) {
  switch (rng() % 9) {
    case 0:  // flip one bit
      if (!s.empty()) s[pick(rng, s.size())] ^= static_cast<char>(1u << (rng() % 8));
      break;
    case 1:  // set a byte to a value parsers care about
      if (!s.empty()) s[pick(rng, s.size())] = static_cast<char>(kBytes[pick(rng, std::size(kBytes))]);
      break;
    case 2:  // truncate
      s.resize(pick(rng, s.size() + 1));
      break;
    case 3: {  // erase a range
      const std::size_t at = pick(rng, s.size() + 1);
      s.erase(at, pick(rng, std::min<std::size_t>(s.size() - at, 64) + 1));
      break;
    }
    case 4: {  // duplicate a range in place
      const std::size_t at = pick(rng, s.size() + 1);
      const std::string piece = s.substr(at, pick(rng, 64));
      s.insert(pick(rng, s.size() + 1), piece);
      break;
    }
    case 5: {  // splice: our prefix, another input's suffix
      const std::string& other = pool[pick(rng, pool.size())];
      s = s.substr(0, pick(rng, s.size() + 1)) + other.substr(pick(rng, other.size() + 1));
      break;
    }
    case 6:  // insert a text fragment
      s.insert(pick(rng, s.size() + 1), kFragments[pick(rng, std::size(kFragments))]);
      break;
    case 7: {  // overwrite 8 bytes with a little-endian boundary value (length prefixes, counts)
      if (s.size() < 8) break;
      std::uint64_t w = kWords[pick(rng, std::size(kWords))];
      if (rng() % 2) w += s.size() - rng() % 16;  // sizes close to the input's own length
      const std::size_t at = rng() % 2 ? 0 : pick(rng, s.size() - 7);
      for (int i = 0; i < 8; ++i) s[at + static_cast<std::size_t>(i)] = static_cast<char>(w >> (8 * i));
      break;
    }
    default: {  // replace one decimal number with another
      const std::size_t at = s.find_first_of("0123456789", pick(rng, s.size() + 1));
      if (at == std::string::npos) break;
      const std::size_t end = s.find_first_not_of("0123456789", at);
      s.replace(at, (end == std::string::npos ? s.size() : end) - at, std::to_string(kWords[pick(rng, std::size(kWords))] + rng() % 3));
    }
  }
}

std::string mutated(const std::vector<std::string>& pool, Rng& rng) {
  std::string s = pool[pick(rng, pool.size())];
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    if (sonde_fuzz_mutate && rng() % 2) sonde_fuzz_mutate(s, rng());
    else mutate_once(s, pool, rng);
  }
  return s;
}

// ---- command line -------------------------------------------------------------------------

struct Options {
  double seconds = 0;
  std::uint64_t iterations = 0, seed = 1;
  std::string write_seeds;
  std::vector<std::string> files;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s [--seconds T] [--iterations N] [--seed S] | --write-seeds DIR | FILE...\n", argv0);
  std::exit(2);
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--seconds" && has_value) o.seconds = std::strtod(argv[++i], nullptr);
    else if (a == "--iterations" && has_value) o.iterations = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--seed" && has_value) o.seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--write-seeds" && has_value) o.write_seeds = argv[++i];
    else if (!a.empty() && a[0] == '-') usage(argv[0]);
    else o.files.push_back(a);
  }
  if (o.seconds <= 0 && o.iterations == 0) o.iterations = 10000;
  return o;
}

std::vector<std::string> seeds() {
  std::vector<std::string> s = sonde_fuzz_seeds ? sonde_fuzz_seeds() : std::vector<std::string>{};
  s.emplace_back();  // the empty input is always a case
  return s;
}

int write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const auto s = seeds();
  for (std::size_t i = 0; i < s.size(); ++i)
    std::ofstream(std::filesystem::path(dir) / ("seed-" + std::to_string(i)), std::ios::binary) << s[i];
  std::printf("wrote %zu seeds to %s\n", s.size(), dir.c_str());
  return 0;
}

int replay_files(const std::vector<std::string>& files) {
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", f.c_str());
      return 2;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    run_one(ss.str());
    std::printf("ok: %s\n", f.c_str());
  }
  return 0;
}

int fuzz_loop(const Options& o) {
  Rng rng(o.seed);
  std::vector<std::string> pool = seeds();
  const std::size_t n_seeds = pool.size();
  for (const auto& s : std::vector<std::string>(pool)) run_one(s);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::uint64_t it = 0;
  for (; (o.iterations == 0 || it < o.iterations) && (o.seconds <= 0 || elapsed() < o.seconds); ++it) {
    std::string input = mutated(pool, rng);
    run_one(input);
    // Keep some mutants so mutations stack; replace old mutants, never the seeds.
    if (rng() % 8 == 0) {
      if (pool.size() < n_seeds + 256) pool.push_back(std::move(input));
      else pool[n_seeds + pick(rng, 256)] = std::move(input);
    }
  }
  std::printf("fuzz driver: %llu inputs in %.1f s from %zu seeds (seed %llu), no crash\n",
              static_cast<unsigned long long>(it), elapsed(), n_seeds, static_cast<unsigned long long>(o.seed));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  install_crash_handlers();
  if (!o.write_seeds.empty()) return write_seeds(o.write_seeds);
  if (!o.files.empty()) return replay_files(o.files);
  return fuzz_loop(o);
}
