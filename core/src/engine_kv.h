#pragma once
// The engine's shared KV cache: one row per running autoregressive sequence, every row's keys
// right-aligned at one common end (`filled`), so that one decode forward appends slot `filled` to
// every row. A row's keys are one contiguous run ending there, with masked slots before it only:
// the attention kernels start their key runs at a row's first allowed key, so a row computes as
// it would alone (left padding, decode.h). Rows are whole sequences in a fixed [slots, capacity]
// allocation, not blocks: the graph reads the past as one strided [B, past] view, which a paged
// layout would need a gather for. When `filled` reaches the capacity, every row moves back so
// that the longest ends at its own length (compaction); the capacity's slack past max_context
// bounds how often that happens (at most once every `slack` steps). They also move back before a
// decode forward whose masked slots, were they copied (a backend that densifies a strided past),
// would cost more than the move (reserve_one).
#include <sonde/session.h>

#include <cstdint>
#include <vector>

namespace sonde {

class KvRows {
 public:
  KvRows(KvCache cache, std::int64_t slack) : cache_(std::move(cache)), slack_(slack) {}
  KvCache& cache() { return cache_; }
  std::int64_t rows() const { return static_cast<std::int64_t>(len_.size()); }
  std::int64_t filled() const { return cache_.filled; }
  std::int64_t capacity() const { return cache_.capacity; }
  std::int64_t length(std::int64_t row) const { return len_.at(static_cast<std::size_t>(row)); }
  // Copies slots [from, from + n) of row `row` of another cache into a new last row; returns its index.
  std::int64_t add(const KvCache& staged, std::int64_t row, std::int64_t from, std::int64_t n);
  // Frees a row: the last row moves into its place (returns the index it had, or -1 if none moved).
  std::int64_t remove(std::int64_t row);
  // Makes room for one more slot in every row: compacts (every row moves back to end at the longest
  // row's length) when full, or when the next forward's copy of masked slots costs more than the move.
  void reserve_one();
  // The key mask [rows, filled + 1] of the next decode forward.
  std::vector<std::uint8_t> decode_mask() const;
  // After a decode forward: every row holds one more slot.
  void appended();
  std::int64_t compactions() const { return compactions_; }

 private:
  void shift_to(std::int64_t new_filled);  // every row's run moves to end at new_filled
  KvCache cache_;
  std::vector<std::int64_t> len_;
  std::int64_t slack_ = 0, compactions_ = 0;
};

}  // namespace sonde
