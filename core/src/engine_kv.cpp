// The engine's shared KV cache (engine_kv.h): rows right-aligned at `filled`.
#include "engine_kv.h"

#include <sonde/error.h>

#include <algorithm>
#include <cstring>

namespace sonde {
namespace {

std::int64_t slot_floats(const Tensor& t) { return t.shape()[2] * t.shape()[3]; }

float* slot_ptr(Tensor& t, std::int64_t row, std::int64_t slot) {
  return t.data<float>() + (row * t.shape()[1] + slot) * slot_floats(t);
}

// Moves n slots of one row from slot `from` to slot `to` in every layer's K and V.
void move_run(KvCache& c, std::int64_t row, std::int64_t from, std::int64_t to, std::int64_t n) {
  if (from == to || n == 0) return;
  for (auto* layers : {&c.k, &c.v})
    for (Tensor& t : *layers)
      std::memmove(slot_ptr(t, row, to), slot_ptr(t, row, from),
                   static_cast<std::size_t>(n * slot_floats(t)) * sizeof(float));
}

}  // namespace

void KvRows::shift_to(std::int64_t new_filled) {
  for (std::int64_t r = 0; r < rows(); ++r) {
    const std::int64_t n = len_[static_cast<std::size_t>(r)];
    move_run(cache_, r, cache_.filled - n, new_filled - n, n);
  }
  cache_.filled = new_filled;
}

std::int64_t KvRows::add(const KvCache& staged, std::int64_t src_row, std::int64_t from, std::int64_t n) {
  if (rows() >= cache_.batch) runtime_error("engine: no free KV row ({} in use)", rows());
  if (n > cache_.capacity - slack_) runtime_error("engine: a {}-slot prompt exceeds the context of {}", n, cache_.capacity - slack_);
  // The new run must end at `filled`: when it is longer than every row so far, they all move right.
  if (n > cache_.filled) shift_to(n);
  const std::int64_t row = rows();
  len_.push_back(n);
  for (std::size_t l = 0; l < cache_.k.size(); ++l)
    for (auto [dst, src] : {std::pair{&cache_.k[l], &staged.k[l]}, std::pair{&cache_.v[l], &staged.v[l]}}) {
      const auto bytes = static_cast<std::size_t>(n * slot_floats(*src)) * sizeof(float);
      const float* from_ptr = src->data<float>() + (src_row * src->shape()[1] + from) * slot_floats(*src);
      std::memcpy(slot_ptr(*dst, row, cache_.filled - n), from_ptr, bytes);
    }
  return row;
}

std::int64_t KvRows::remove(std::int64_t row) {
  const std::int64_t last = rows() - 1;
  if (row < 0 || row > last) runtime_error("engine: no KV row {}", row);
  std::int64_t moved = -1;
  if (row != last) {
    const std::int64_t n = len_[static_cast<std::size_t>(last)];
    for (auto* layers : {&cache_.k, &cache_.v})
      for (Tensor& t : *layers)
        std::memcpy(slot_ptr(t, row, cache_.filled - n), slot_ptr(t, last, cache_.filled - n),
                    static_cast<std::size_t>(n * slot_floats(t)) * sizeof(float));
    len_[static_cast<std::size_t>(row)] = n;
    moved = last;
  }
  len_.pop_back();
  if (len_.empty()) cache_.filled = 0;
  return moved;
}

// A decode forward's past is one strided [rows, filled] view of the cache, masked slots included.
// The new slot is written into the cache in place and the threaded attention reads that view where
// it is, from each row's first allowed key, so there the masked slots cost nothing. A backend that
// densifies a strided input first (reference, cpu-blas) copies them: rows x (filled - longest)
// wasted slots a forward, from when the longest row leaves until a longer one comes. Moving the
// rows back costs one copy of their own slots, sum(len). So the rows move when one forward's waste
// is at least that move: on those backends it pays for itself in that forward; on threaded it is
// a copy of the rows' own slots at the rare step the rule fires (when the longest row leaves far
// ahead of the others).
void KvRows::reserve_one() {
  if (len_.empty()) return;
  const std::int64_t longest = *std::max_element(len_.begin(), len_.end());
  std::int64_t own = 0;
  for (const auto n : len_) own += n;
  const bool full = cache_.filled + 1 > cache_.capacity;
  if (!full && rows() * (cache_.filled - longest) < own) return;
  if (longest + 1 > cache_.capacity) runtime_error("engine: a sequence of {} slots outgrew the KV capacity {}", longest, cache_.capacity);
  shift_to(longest);
  ++compactions_;
}

std::vector<std::uint8_t> KvRows::decode_mask() const {
  const std::int64_t S = cache_.filled + 1;
  std::vector<std::uint8_t> m(static_cast<std::size_t>(rows() * S), 0);
  for (std::int64_t r = 0; r < rows(); ++r)
    std::fill(m.begin() + r * S + (cache_.filled - len_[static_cast<std::size_t>(r)]), m.begin() + (r + 1) * S, 1);
  return m;
}

void KvRows::appended() {
  for (auto& n : len_) ++n;
}

}  // namespace sonde
