#pragma once
// Which part of every layer one rank of a tensor-parallel model copy holds (Megatron-style):
// query heads split as evenly as possible, each rank holding (replicating) the kv heads its query
// heads read; MLP columns and the vocabulary split as evenly as possible. The model learns its
// rank from the backend (BackendInfo::tensor_parallel, tensor_rank); core knows nothing of it.
#include <cstdint>

namespace sonde::common {

struct DecoderSpec;

struct Range {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

struct ShardPlan {
  int rank = 0, ranks = 1;
  Range q;        // query heads
  Range kv;       // kv heads held: every one a query head of q reads
  Range kv_own;   // the kv heads this rank contributes when k or v is gathered (each once in all)
  Range mlp;      // intermediate columns (gate, up rows; down columns)
  Range vocab;    // LM head rows
  std::int64_t kv_group = 1;  // query heads per kv head
  bool active() const { return ranks > 1; }

  // The whole model on one rank when ranks == 1. BadInput when the model cannot be split so.
  static ShardPlan make(const DecoderSpec& s, int rank, int ranks);
};

// Part r of n items split over `ranks` as evenly as possible (sizes differ by at most one).
Range even_part(std::int64_t n, int rank, int ranks);

}  // namespace sonde::common
