#include "shard.h"

#include "decoder.h"

#include <sonde/error.h>

namespace sonde::common {

Range even_part(std::int64_t n, int rank, int ranks) {
  return {n * rank / ranks, n * (rank + 1) / ranks};
}

ShardPlan ShardPlan::make(const DecoderSpec& s, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) runtime_error("tensor parallel: rank {} of {}", rank, ranks);
  if (ranks > s.heads)
    bad_input("--tensor-parallel: {} ranks per model copy but the model has {} query heads (at most one rank per head)",
              ranks, s.heads);
  if (ranks > s.intermediate || ranks > s.vocab)
    bad_input("--tensor-parallel: {} ranks per model copy but the model has {} MLP columns and {} vocabulary rows", ranks,
              s.intermediate, s.vocab);
  ShardPlan p;
  p.rank = rank;
  p.ranks = ranks;
  p.kv_group = s.heads / s.kv_heads;
  p.q = even_part(s.heads, rank, ranks);
  p.kv = {p.q.begin / p.kv_group, (p.q.end - 1) / p.kv_group + 1};
  // A kv head is given by the rank holding its first query head: ceil(q.begin / group) onwards.
  p.kv_own = {(p.q.begin + p.kv_group - 1) / p.kv_group, (p.q.end + p.kv_group - 1) / p.kv_group};
  p.mlp = even_part(s.intermediate, rank, ranks);
  p.vocab = even_part(s.vocab, rank, ranks);
  return p;
}

}  // namespace sonde::common
