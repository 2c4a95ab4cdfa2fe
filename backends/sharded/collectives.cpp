#include "collectives.h"

#include <sonde/error.h>
#include <sonde/op_checks.h>

#include <cstring>
#include <vector>

namespace sonde::sharded {

void all_reduce_sum(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out) {
  const ops::DenseInputs dense(in);
  ops::check_all_reduce(node, dense.views(), out);
  std::memcpy(out.data, dense.views()[0].data, out.nbytes());
  group.allreduce_sum({out.as<float>(), static_cast<std::size_t>(out.numel())});
}

void all_gather(ProcessGroup& group, const Node& node, std::span<const TensorView> in, const TensorView& out,
                GatherScratch& scratch) {
  const ops::DenseInputs dense(in);
  const auto d = ops::check_all_gather(node, dense.views(), out);
  const std::int64_t kept = d.keep_end - d.keep_begin, row = d.outer * d.inner;
  // This rank's kept part, [outer, kept, inner], as the values it sends: the input itself when
  // the part is contiguous (one outer row), else staged.
  const auto* x = dense.views()[0].as<const float>();
  std::span<const float> mine;
  if (d.outer == 1 || kept == 0) {
    mine = {x + d.keep_begin * d.inner, static_cast<std::size_t>(kept * d.inner)};
  } else {
    scratch.send.resize(static_cast<std::size_t>(d.outer * kept * d.inner));
    for (std::int64_t o = 0; o < d.outer; ++o)
      std::memcpy(scratch.send.data() + o * kept * d.inner, x + (o * d.axis_len + d.keep_begin) * d.inner,
                  static_cast<std::size_t>(kept * d.inner) * sizeof(float));
    mine = scratch.send;
  }
  // Every rank's part in rank order, [rank part][outer, len, inner]; with one outer row that is
  // the output's own layout, received in place.
  float* y = out.as<float>();
  const std::size_t total = static_cast<std::size_t>(node.params.gathered * row);
  float* all = y;
  if (d.outer != 1) {
    scratch.recv.resize(total);
    all = scratch.recv.data();
  }
  std::vector<std::size_t> sizes;
  try {
    sizes = group.allgather_into(std::as_bytes(mine), std::as_writable_bytes(std::span<float>(all, total)));
  } catch (const Error& e) {
    ops::fail(node, "gathering {} values along axis {}: {}", node.params.gathered, node.params.axis, e.what());
  }
  if (d.outer == 1) return;
  std::int64_t at = 0;  // where this rank's part starts along the axis
  const float* src = all;
  for (const std::size_t bytes : sizes) {
    const std::int64_t len = static_cast<std::int64_t>(bytes / sizeof(float)) / row;
    for (std::int64_t o = 0; len > 0 && o < d.outer; ++o)
      std::memcpy(y + (o * node.params.gathered + at) * d.inner, src + o * len * d.inner,
                  static_cast<std::size_t>(len * d.inner) * sizeof(float));
    src += d.outer * len * d.inner;
    at += len;
  }
}

namespace {

// Heads [h0, h0 + n) of a [B, X, heads, W] view (any strides), as a dense f32-or-other tensor.
Tensor heads_of(const TensorView& v, std::int64_t h0, std::int64_t n) {
  TensorView part = v;
  part.data = static_cast<std::byte*>(v.data) + h0 * v.strides[2] * static_cast<std::int64_t>(dtype_size(v.dtype));
  part.shape[2] = n;
  return Tensor::copy_of(part);
}

}  // namespace

void sharded_attention(Backend& local, const Node& node, std::span<const TensorView> in, const TensorView& out) {
  const auto d = ops::check_attention(node, in, out, node.op == OpKind::AttentionPattern);
  Node usual = node;
  usual.params.kv_group = 0;
  usual.params.q_head0 = usual.params.kv_head0 = 0;
  if (ops::usual_kv_groups(node.params, d.nh, d.nkv)) return local.run(usual, in, out);
  // Runs of query heads that read one kv head each run as a model of one kv head.
  const std::int64_t W = out.shape[3];  // d (Attention) or S (AttentionPattern)
  for (std::int64_t h0 = 0; h0 < d.nh;) {
    const std::int64_t kv = ops::kv_head_of(node, d, h0);
    std::int64_t n = 1;
    while (h0 + n < d.nh && ops::kv_head_of(node, d, h0 + n) == kv) ++n;
    const Tensor q = heads_of(in[0], h0, n), k = heads_of(in[1], kv, 1), v = heads_of(in[2], kv, 1);
    std::vector<TensorView> args{q.view(), k.view(), v.view()};
    if (in.size() == 4) args.push_back(in[3]);
    Tensor y(DType::f32, Shape{d.B, d.T, n, W});
    usual.shape = y.shape();
    local.run(usual, args, y.view());
    float* o = out.as<float>();
    const float* src = y.data<float>();
    for (std::int64_t bt = 0; bt < d.B * d.T; ++bt)
      std::memcpy(o + (bt * d.nh + h0) * W, src + bt * n * W, static_cast<std::size_t>(n * W) * sizeof(float));
    h0 += n;
  }
}

}  // namespace sonde::sharded
