// BPE merges by rank over ids. The lowest-ranked pair is merged first, leftmost among equals,
// which is the order Hugging Face's priority queue of (rank, position) produces.
#include <functional>
#include <limits>
#include <queue>

#include "tokenizer_internal.h"

namespace sonde::tok {
namespace {

constexpr std::size_t kSmallPiece = 48;        // above this, the heap version avoids O(n^2)
constexpr std::size_t kMaxCachedPiece = 256;   // long runs are rare; do not let them fill the cache
constexpr std::size_t kMaxShardEntries = 1 << 16;

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (std::uint64_t(std::uint32_t(left)) << 32) | std::uint32_t(right);
}

}  // namespace

void Bpe::add_merge(std::int32_t left, std::int32_t right, std::int32_t merged) {
  // A repeated pair keeps its first (lowest) rank, as HF's merge map does.
  merges_.try_emplace(pair_key(left, right), Merge{static_cast<std::int32_t>(merges_.size()), merged});
}

const Merge* Bpe::find(std::int32_t left, std::int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void Bpe::merge_small(std::vector<std::int32_t>& syms) const {
  while (syms.size() > 1) {
    std::size_t best = 0;
    const Merge* best_merge = nullptr;
    for (std::size_t i = 0; i + 1 < syms.size(); ++i) {
      const Merge* m = find(syms[i], syms[i + 1]);
      if (m != nullptr && (best_merge == nullptr || m->rank < best_merge->rank)) {
        best = i;
        best_merge = m;
      }
    }
    if (best_merge == nullptr) return;
    syms[best] = best_merge->id;
    syms.erase(syms.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

void Bpe::merge_large(std::vector<std::int32_t>& syms) const {
  // Doubly linked symbols plus a min-heap of candidate merges; stale entries are skipped.
  const auto n = static_cast<std::int32_t>(syms.size());
  std::vector<std::int32_t> prev(n), next(n);
  for (std::int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Cand {
    std::int32_t rank, pos, left, right;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<>> heap;
  auto push = [&](std::int32_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (const Merge* m = find(syms[pos], syms[next[pos]])) heap.push({m->rank, pos, syms[pos], syms[next[pos]]});
  };
  for (std::int32_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    const std::int32_t r = next[c.pos];
    if (dead[c.pos] || r < 0 || syms[c.pos] != c.left || syms[r] != c.right) continue;
    syms[c.pos] = find(c.left, c.right)->id;
    dead[r] = true;
    next[c.pos] = next[r];
    if (next[r] >= 0) prev[next[r]] = c.pos;
    push(prev[c.pos]);
    push(c.pos);
  }
  std::vector<std::int32_t> out;
  for (std::int32_t i = 0; i >= 0; i = next[i]) out.push_back(syms[i]);
  syms.swap(out);
}

void Bpe::encode(std::string_view piece, std::vector<std::int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  Shard& shard = cache_[std::hash<std::string_view>{}(piece) % kShards];
  if (cacheable) {
    std::lock_guard lock(shard.mutex);
    if (const auto it = shard.map.find(std::string(piece)); it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> syms;
  syms.reserve(piece.size());
  for (unsigned char b : piece) syms.push_back(byte_id_[b]);
  if (syms.size() <= kSmallPiece) merge_small(syms);
  else merge_large(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard lock(shard.mutex);
    if (shard.map.size() >= kMaxShardEntries) shard.map.clear();
    shard.map.emplace(std::string(piece), std::move(syms));
  }
}

}  // namespace sonde::tok
