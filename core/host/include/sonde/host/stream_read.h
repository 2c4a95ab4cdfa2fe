#pragma once
// A plain streaming read of memory, the yardstick of memory-bound work (decode reads every weight
// once per token). Used by `sonde bench` (over the backend's own weight bytes) and by
// bench/gemm_bench (over a buffer of its own).
#include <cstddef>
#include <cstdint>
#include <span>

namespace sonde::host {

struct ByteRange {
  const void* data;
  std::size_t bytes;
};

// Reads every byte of `ranges` once, split over `threads` short-lived threads in contiguous
// shares of about equal bytes, each share read as `streams` runs in step (1 to 8), with the
// widest vector ISA of the machine; returns the seconds taken. `checksum` (if not null) receives
// the sum of all 64-bit words read (tails byte-wise), so the read cannot be optimised away and
// a test can check it.
double stream_read(std::span<const ByteRange> ranges, int threads, std::uint64_t* checksum = nullptr, int streams = 1);

// The faster of a one-stream and a four-stream read per thread, in seconds: the yardstick a
// memory-bound kernel is judged by, whichever access shape suits the memory system better.
double fastest_read(std::span<const ByteRange> ranges, int threads);

}  // namespace sonde::host
