#pragma once
// The graph's collectives (OpKind::AllReduceSum, AllGather) and attention over a shard's heads,
// run on one rank of a tensor-parallel model copy.
#include <sonde/backend.h>
#include <sonde/process_group.h>

#include <vector>

namespace sonde::sharded {

// Staging kept from one gather to the next: a prefill's logits gather is tens of MB, and a fresh
// buffer each time paid its page faults and zeroing on every call.
struct GatherScratch {
  std::vector<float> send, recv;
};

void all_reduce_sum(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out);
void all_gather(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out,
                GatherScratch& scratch);
// Attention (or AttentionPattern) whose local query heads read kv heads by a shard's mapping
// (OpParams::kv_group): run on `local` directly when the mapping is the usual contiguous groups,
// else as one call per run of query heads that share a kv head.
void sharded_attention(Backend& local, const Node& node, std::span<const TensorView> in, const TensorView& out);

}  // namespace sonde::sharded
