// The sums use four independent accumulators and the widest vector loads: a narrow or dependent
// loop under-reads the bandwidth by up to 1.5x (measured on this machine's AVX-512 EPYC).
// With `streams` > 1 a thread reads its share as that many runs, 256 bytes of each in turn: the
// hardware prefetcher then follows several streams per core, which read 5-10% faster than one
// here when the host's bandwidth is low (the threaded GEMV reads 4 rows at once and beat the
// one-stream read by that much, so a bound taken from it alone was not a bound).
#include <sonde/host/stream_read.h>

#include <sonde/host/cpu.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <immintrin.h>

namespace sonde::host {
namespace {

constexpr int kMaxStreams = 8;

// Bytes [0, n) of every p[s], s < streams, 256 bytes of each in turn; n a multiple of 256.
using SumFn = std::uint64_t (*)(const unsigned char* const* p, int streams, std::size_t n);

__attribute__((target("avx512f"))) std::uint64_t sum_avx512(const unsigned char* const* p, int streams, std::size_t n) {
  __m512i a0 = _mm512_set1_epi64(0), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i < n; i += 256)
    for (int s = 0; s < streams; ++s) {
      const unsigned char* q = p[s] + i;
      a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(q));
      a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(q + 64));
      a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(q + 128));
      a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(q + 192));
    }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (auto v : lanes) s += v;
  return s;
}

__attribute__((target("avx2"))) std::uint64_t sum_avx2(const unsigned char* const* p, int streams, std::size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (std::size_t i = 0; i < n; i += 256)
    for (int s = 0; s < streams; ++s)
      for (std::size_t j = 0; j < 256; j += 128) {
        const auto* v = reinterpret_cast<const __m256i*>(p[s] + i + j);
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(v));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(v + 1));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(v + 2));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(v + 3));
      }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + lanes[2] + lanes[3];
}

std::uint64_t sum_scalar(const unsigned char* const* p, int streams, std::size_t n) {
  std::uint64_t a[4] = {0, 0, 0, 0};
  for (std::size_t i = 0; i < n; i += 256)
    for (int s = 0; s < streams; ++s)
      for (std::size_t j = 0; j < 256; j += 32)
        for (int k = 0; k < 4; ++k) {
          std::uint64_t w;
          std::memcpy(&w, p[s] + i + j + 8 * static_cast<std::size_t>(k), 8);
          a[k] += w;
        }
  return a[0] + a[1] + a[2] + a[3];
}

SumFn widest_sum() {
  const auto& f = cpu_features();
  if (f.avx512f) return sum_avx512;
  if (f.avx2) return sum_avx2;
  return sum_scalar;
}

// The little-endian 64-bit words of p[0, n), the last one zero-padded: how a range's tail counts.
std::uint64_t words(const unsigned char* p, std::size_t n) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<std::size_t>(8, n - i));
    s += w;
  }
  return s;
}

// [from, to) of the concatenation of `ranges` cut into `parts` pieces of about equal bytes. Every
// cut falls on a multiple of 256 bytes from the start of the range it is in, so each range is
// summed in the same 64-bit words however it is cut (the checksum with it); `from` must be such
// a point too.
std::vector<std::size_t> cuts(std::span<const ByteRange> ranges, std::size_t from, std::size_t to, std::size_t parts) {
  std::vector<std::size_t> edge(parts + 1, to);
  edge[0] = from;
  for (std::size_t t = 1; t < parts; ++t) {
    const std::size_t target = from + (to - from) / parts * t;
    std::size_t base = 0;
    for (const auto& r : ranges) {
      if (target < base + r.bytes) {
        edge[t] = std::max(edge[t - 1], base + (target - base) / 256 * 256);
        break;
      }
      base += r.bytes;
    }
  }
  return edge;
}

struct Piece {
  const unsigned char* p;
  std::size_t n;
};

// [from, to) as contiguous pieces, one per range it touches.
std::vector<Piece> pieces(std::span<const ByteRange> ranges, std::size_t from, std::size_t to) {
  std::vector<Piece> out;
  std::size_t base = 0;
  for (const auto& r : ranges) {
    const std::size_t lo = std::max(from, base), hi = std::min(to, base + r.bytes);
    if (lo < hi) out.push_back({static_cast<const unsigned char*>(r.data) + (lo - base), hi - lo});
    base += r.bytes;
  }
  return out;
}

// One thread's share [from, to) read as `streams` runs in step: all runs advance by whole
// 256-byte blocks together; a run whose piece has less than a block left sums it as words (that
// only happens at a range's end) and moves on to its next piece.
std::uint64_t sum_share(std::span<const ByteRange> ranges, std::size_t from, std::size_t to, int streams, SumFn sum) {
  struct Run {
    std::vector<Piece> pieces;
    std::size_t i = 0, off = 0;
  };
  const auto edge = cuts(ranges, from, to, static_cast<std::size_t>(streams));
  std::vector<Run> runs(static_cast<std::size_t>(streams));
  for (std::size_t s = 0; s < runs.size(); ++s) runs[s].pieces = pieces(ranges, edge[s], edge[s + 1]);
  std::uint64_t total = 0;
  std::vector<Run*> live;
  std::vector<const unsigned char*> at;
  for (;;) {
    live.clear();
    at.clear();
    std::size_t step = SIZE_MAX;
    for (auto& r : runs)
      if (r.i < r.pieces.size()) {
        live.push_back(&r);
        at.push_back(r.pieces[r.i].p + r.off);
        step = std::min(step, (r.pieces[r.i].n - r.off) / 256 * 256);
      }
    if (live.empty()) return total;
    if (step > 0) total += sum(at.data(), static_cast<int>(at.size()), step);
    for (Run* r : live) {
      r->off += step;
      const Piece& pc = r->pieces[r->i];
      if (pc.n - r->off < 256) {
        total += words(pc.p + r->off, pc.n - r->off);
        ++r->i;
        r->off = 0;
      }
    }
  }
}

}  // namespace

double stream_read(std::span<const ByteRange> ranges, int threads, std::uint64_t* checksum, int streams) {
  static const SumFn sum = widest_sum();
  std::size_t total = 0;
  for (const auto& r : ranges) total += r.bytes;
  const auto n = static_cast<std::size_t>(std::max(1, threads));
  const int per_thread = std::clamp(streams, 1, kMaxStreams);
  const auto edge = cuts(ranges, 0, total, n);
  std::vector<std::uint64_t> sums(n, 0);
  const auto t0 = std::chrono::steady_clock::now();
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 1; t < n; ++t)
      pool.emplace_back([&, t] { sums[t] = sum_share(ranges, edge[t], edge[t + 1], per_thread, sum); });
    sums[0] = sum_share(ranges, edge[0], edge[1], per_thread, sum);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (checksum) {
    *checksum = 0;
    for (auto v : sums) *checksum += v;
  }
  return seconds;
}

double fastest_read(std::span<const ByteRange> ranges, int threads) {
  return std::min(stream_read(ranges, threads, nullptr, 1), stream_read(ranges, threads, nullptr, 4));
}

}  // namespace sonde::host
