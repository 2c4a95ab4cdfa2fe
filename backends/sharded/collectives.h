#pragma once
// The graph's collectives (OpKind::AllReduceSum, AllGather) and attention over a shard's heads,
// run on one rank of a tensor-parallel model copy.
#include <sonde/backend.h>
#include <sonde/process_group.h>

namespace sonde::sharded {

void all_reduce_sum(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out);
void all_gather(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out);
// Attention (or AttentionPattern) whose local query heads read kv heads by a shard's mapping
// (OpParams::kv_group): run on `local` directly when the mapping is the usual contiguous groups,
// else as one call per run of query heads that share a kv head.
void sharded_attention(Backend& local, const Node& node, std::span<const TensorView> in, const TensorView& out);

}  // namespace sonde::sharded
