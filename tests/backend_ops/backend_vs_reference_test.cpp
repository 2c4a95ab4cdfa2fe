// Every backend found in the plugin root runs each op on random inputs with odd shapes and is
// compared with `reference`: normalised error max|a-b| / max|ref| <= 1e-5, and no NaN or Inf.
#include "op_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <iostream>

namespace sonde::test {
namespace {

constexpr double kTol = 1e-5;
const DType kWeightTypes[] = {DType::f32, DType::bf16, DType::f16};

class BackendOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    backend_ = make_backend(GetParam());
    reference_ = make_backend("reference");
  }

  // Runs `node` on both backends; a node the backend declines is the executor's fallback case,
  // so it is skipped here (and reported) rather than failed.
  void compare(const Node& node, const std::vector<Arg>& args) {
    std::vector<DType> dtypes;
    for (const auto& v : prepared_inputs(*backend_, args)) dtypes.push_back(v.dtype);
    if (!backend_->supports(node, dtypes)) {
      std::cout << "[ note ] " << GetParam() << " declines " << op_name(node.op) << "\n";
      return;
    }
    const Tensor ref = run_on(*reference_, node, args);
    const Tensor got = run_on(*backend_, node, args);
    ASSERT_TRUE(all_finite(ref));
    EXPECT_TRUE(all_finite(got));
    EXPECT_LE(normalised_error(got, ref), kTol);
  }

  std::shared_ptr<Backend> backend_, reference_;
};

TEST_P(BackendOps, Embedding) {
  for (DType wt : kWeightTypes) {
    SCOPED_TRACE(std::string(dtype_name(wt)));
    const Node n = make_node(OpKind::Embedding, Shape{2, 7, 10});
    compare(n, {{random_tensor(wt, Shape{37, 10}, 1), true}, {random_ids(Shape{2, 7}, 2, 0, 37)}});
  }
}

TEST_P(BackendOps, RmsNorm) {
  for (DType wt : kWeightTypes)
    for (std::int64_t H : {13, 16, 896}) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " H=" + std::to_string(H));
      Node n = make_node(OpKind::RmsNorm, Shape{2, 7, H});
      n.params.eps = 1e-6f;
      compare(n, {{random_tensor(DType::f32, Shape{2, 7, H}, 3, -4, 4)}, {random_tensor(wt, Shape{H}, 4, 0.5f, 1.5f), true}});
    }
}

TEST_P(BackendOps, Linear) {
  struct Case { Shape x; std::int64_t N; bool bias; };
  const Case cases[] = {{Shape{2, 7, 13}, 37, true},  {Shape{2, 7, 13}, 10, false}, {Shape{1, 1, 300}, 37, true},
                        {Shape{1, 300}, 70, false},   {Shape{33, 300}, 70, true},   {Shape{2, 1, 16}, 13, true}};
  for (DType wt : kWeightTypes)
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(dtype_name(wt)) + " x=" + c.x.str() + " N=" + std::to_string(c.N));
      const std::int64_t K = c.x.last();
      Shape out = c.x;
      out[out.rank - 1] = c.N;
      std::vector<Arg> args{{random_tensor(DType::f32, c.x, 5)}, {random_tensor(wt, Shape{c.N, K}, 6), true}};
      if (c.bias) args.push_back({random_tensor(wt, Shape{c.N}, 7), true});
      compare(make_node(OpKind::Linear, out), args);
    }
}

// --compute bf16 and int8 (<sonde/compute.h>): each backend in the mode against the reference
// backend's emulation of it (a backend that does not implement the mode declines Linear, the
// executor's fallback). The modes' outputs differ from the exact f32 ones by far more than the
// tolerance, so a backend that ignored the mode would fail here.
TEST_P(BackendOps, LinearInEachComputeMode) {
  struct Mode { std::string compute, weights; };
  struct Case { Shape x; std::int64_t N; bool bias; };
  const Case cases[] = {{Shape{2, 7, 13}, 37, true}, {Shape{1, 300}, 70, false}, {Shape{33, 300}, 70, true},
                        {Shape{5, 64}, 203, false}, {Shape{3, 1100}, 40, true}};
  for (const Mode& mode : {Mode{"bf16", "native"}, Mode{"int8", "q8"}}) {
    backend_ = make_backend(GetParam(), 0, mode.weights, mode.compute);  // threads 0: the backend's default
    reference_ = make_backend("reference", 0, mode.weights, mode.compute);
    auto exact = make_backend("reference");
    for (DType wt : kWeightTypes)
      for (const auto& c : cases) {
        SCOPED_TRACE(mode.compute + " " + std::string(dtype_name(wt)) + " x=" + c.x.str() + " N=" + std::to_string(c.N));
        const std::int64_t K = c.x.last();
        Shape out = c.x;
        out[out.rank - 1] = c.N;
        std::vector<Arg> args{{random_tensor(DType::f32, c.x, 5)}, {random_tensor(wt, Shape{c.N, K}, 6), true}};
        if (c.bias) args.push_back({random_tensor(wt, Shape{c.N}, 7), true});
        const Node n = make_node(OpKind::Linear, out);
        compare(n, args);
        EXPECT_GT(normalised_error(run_on(*reference_, n, args), run_on(*exact, n, args)), 1e-4) << "the mode changed nothing";
      }
  }
}

TEST_P(BackendOps, Reshape) {
  Node n = make_node(OpKind::Reshape, Shape{2, 7, 2, 6});
  n.params.shape = n.shape;
  compare(n, {{random_tensor(DType::f32, Shape{2, 7, 12}, 8)}});
}

TEST_P(BackendOps, Rope) {
  for (std::int64_t d : {6, 10, 16, 64})
    for (double theta : {1e4, 1e6}) {
      SCOPED_TRACE("d=" + std::to_string(d) + " theta=" + std::to_string(theta));
      for (std::int64_t T : {1, 7}) {
        Node n = make_node(OpKind::Rope, Shape{2, T, 6, d});
        n.params.theta = theta;
        compare(n, {{random_tensor(DType::f32, n.shape, 9)}, {random_ids(Shape{2, T}, 10, 0, 5000)}});
      }
    }
}

struct AttnCase {
  std::int64_t B, T, S, nh, nkv, d;
  bool causal, mask;
};

// Batch row 1 is left-padded (slots 0 and 1 masked), so with the pairwise rule its first query
// rows see no key at all; batch row 0 has a padded slot in the middle.
Tensor padded_mask(std::int64_t B, std::int64_t S) {
  std::vector<int> m(static_cast<std::size_t>(B * S), 1);
  if (S > 3) m[2] = 0;
  for (std::int64_t u = 0; u < std::min<std::int64_t>(2, S - 1) && B > 1; ++u) m[static_cast<std::size_t>(S + u)] = 0;
  return bytes(Shape{B, S}, m);
}

TEST_P(BackendOps, Attention) {
  const AttnCase cases[] = {
      {2, 7, 7, 6, 2, 16, true, false}, {2, 7, 7, 6, 3, 10, false, false}, {2, 1, 9, 6, 3, 10, true, false},
      {2, 7, 7, 6, 2, 6, true, true},   {2, 7, 7, 6, 3, 16, false, true},  {2, 3, 11, 6, 2, 16, true, true},
      {2, 1, 9, 6, 2, 16, true, true},  {1, 5, 5, 13, 13, 6, false, true}, {2, 4, 13, 4, 1, 64, false, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("B={} T={} S={} nh={} nkv={} d={} causal={} mask={}", c.B, c.T, c.S, c.nh, c.nkv, c.d,
                             c.causal, c.mask));
    Node n = make_node(OpKind::Attention, Shape{c.B, c.T, c.nh, c.d});
    n.params.causal = c.causal;
    std::vector<Arg> args{{random_tensor(DType::f32, Shape{c.B, c.T, c.nh, c.d}, 11, -3, 3)},
                          {random_tensor(DType::f32, Shape{c.B, c.S, c.nkv, c.d}, 12, -3, 3)},
                          {random_tensor(DType::f32, Shape{c.B, c.S, c.nkv, c.d}, 13)}};
    if (c.mask) args.push_back({padded_mask(c.B, c.S)});
    compare(n, args);
  }
}

TEST_P(BackendOps, AddAndSiluMul) {
  for (OpKind op : {OpKind::Add, OpKind::SiluMul})
    for (const Shape& s : {Shape{2, 7, 13}, Shape{1, 1, 37}, Shape{3, 1000}}) {
      SCOPED_TRACE(std::string(op_name(op)) + " " + s.str());
      compare(make_node(op, s), {{random_tensor(DType::f32, s, 14, -8, 8)}, {random_tensor(DType::f32, s, 15, -2, 2)}});
    }
}

// KV-cache concat along dim 1, including an empty past (P = 0) and a one-row step (T = 1).
TEST_P(BackendOps, Concat) {
  for (std::int64_t P : {0, 1, 9})
    for (std::int64_t T : {1, 5}) {
      SCOPED_TRACE("P=" + std::to_string(P) + " T=" + std::to_string(T));
      compare(make_node(OpKind::Concat, Shape{3, P + T, 2, 16}),
              {{random_tensor(DType::f32, Shape{3, P, 2, 16}, 25)}, {random_tensor(DType::f32, Shape{3, T, 2, 16}, 26)}});
    }
}

// A decode step's KV concat for one row is placed in the cache: the output buffer starts where
// the past already is, so the kernel must leave those bytes alone (a memcpy onto itself is
// undefined) and append the new rows after them. Every backend, against the plain concat.
TEST_P(BackendOps, ConcatOverItsFirstInput) {
  for (std::int64_t P : {1, 9})
    for (std::int64_t T : {1, 3}) {
      SCOPED_TRACE("P=" + std::to_string(P) + " T=" + std::to_string(T));
      const Node node = make_node(OpKind::Concat, Shape{1, P + T, 2, 16});
      const Tensor past = random_tensor(DType::f32, Shape{1, P, 2, 16}, 27), fresh = random_tensor(DType::f32, Shape{1, T, 2, 16}, 28);
      const Tensor expected = run_on(*reference_, node, {{past}, {fresh}});
      Tensor cache(DType::f32, Shape{1, P + T + 4, 2, 16});  // room to spare, as a cache has
      std::memcpy(cache.data<float>(), past.data<float>(), static_cast<std::size_t>(past.view().nbytes()));
      TensorView out = cache.view();
      out.shape[1] = P + T;
      TensorView in_place = out;
      in_place.shape[1] = P;
      const std::vector<TensorView> ins{in_place, fresh.view()};
      backend_->run(node, ins, out);
      backend_->sync();
      EXPECT_EQ(values(Tensor::copy_of(out)), values(expected));
    }
}

// A batch's past keys are a view of the KV cache whose rows are `capacity` slots apart: the
// concat of that strided view equals the concat of a dense copy, on every backend.
TEST_P(BackendOps, ConcatOfAStridedPast) {
  for (std::int64_t P : {1, 9}) {
    SCOPED_TRACE("P=" + std::to_string(P));
    const Tensor cache = random_tensor(DType::f32, Shape{3, P + 5, 2, 16}, 29);
    TensorView past = cache.view();
    past.shape[1] = P;
    ASSERT_FALSE(past.contiguous());
    const Tensor fresh = random_tensor(DType::f32, Shape{3, 2, 2, 16}, 30);
    const Node node = make_node(OpKind::Concat, Shape{3, P + 2, 2, 16});
    const Tensor expected = run_on(*reference_, node, {{Tensor::copy_of(past)}, {fresh}});
    Tensor got(DType::f32, node.shape);
    const std::vector<TensorView> ins{past, fresh.view()};
    backend_->run(node, ins, got.view());
    backend_->sync();
    EXPECT_EQ(values(got), values(expected));
  }
}

// The LM head's row selection: the last row (a prefill's), a middle range, all rows and none,
// on batches of 1 and 3; a copy, so bit-identical to reference.
TEST_P(BackendOps, SliceRows) {
  for (auto [B, T, b, e] : {std::array<std::int64_t, 4>{1, 7, 6, 7}, {3, 7, 6, 7}, {3, 9, 2, 5}, {2, 4, 0, 4}, {2, 4, 4, 4}}) {
    SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " rows " + std::to_string(b) + ".." + std::to_string(e));
    Node node = make_node(OpKind::SliceRows, Shape{B, e - b, 3, 5});
    node.params.row_begin = b;
    node.params.row_end = e;
    const std::vector<Arg> args{{random_tensor(DType::f32, Shape{B, T, 3, 5}, 31)}};
    compare(node, args);
    std::vector<DType> dtypes{DType::f32};
    if (backend_->supports(node, dtypes)) { EXPECT_EQ(values(run_on(*backend_, node, args)), values(run_on(*reference_, node, args))); }
  }
}

// The same node on the same inputs gives bit-identical output.
TEST_P(BackendOps, Deterministic) {
  Node attn = make_node(OpKind::Attention, Shape{2, 7, 6, 16});
  attn.params.causal = true;
  const std::vector<Arg> attn_args{{random_tensor(DType::f32, Shape{2, 7, 6, 16}, 16)},
                                   {random_tensor(DType::f32, Shape{2, 9, 2, 16}, 17)},
                                   {random_tensor(DType::f32, Shape{2, 9, 2, 16}, 18)},
                                   {padded_mask(2, 9)}};
  const std::vector<Arg> lin_args{{random_tensor(DType::f32, Shape{5, 300}, 19)},
                                  {random_tensor(DType::bf16, Shape{70, 300}, 20), true}};
  const std::vector<Arg> gemv_args{{random_tensor(DType::f32, Shape{1, 300}, 21)},
                                   {random_tensor(DType::f32, Shape{70, 300}, 22), true}};
  const std::vector<Arg> silu_args{{random_tensor(DType::f32, Shape{3, 1001}, 23)}, {random_tensor(DType::f32, Shape{3, 1001}, 24)}};
  const std::pair<Node, const std::vector<Arg>*> runs[] = {{attn, &attn_args},
                                                           {make_node(OpKind::Linear, Shape{5, 70}), &lin_args},
                                                           {make_node(OpKind::Linear, Shape{1, 70}), &gemv_args},
                                                           {make_node(OpKind::SiluMul, Shape{3, 1001}), &silu_args}};
  for (const auto& [node, args] : runs) {
    SCOPED_TRACE(std::string(op_name(node.op)) + " " + node.shape.str());
    const Tensor a = run_on(*backend_, node, *args);
    const Tensor b = run_on(*backend_, node, *args);
    EXPECT_EQ(std::memcmp(a.view().data, b.view().data, a.view().nbytes()), 0);
  }
}

// Weights read back through weight(name) hold the uploaded values (widening is exact).
TEST_P(BackendOps, UploadedWeightsReadBack) {
  for (DType wt : kWeightTypes) {
    const Tensor src = random_tensor(wt, Shape{13, 6}, 25);
    backend_->upload("blocks.0.w", src.view(), Split::None);
    const TensorView got = backend_->weight("blocks.0.w");
    EXPECT_EQ(got.shape, src.shape());
    EXPECT_EQ(values(Tensor::copy_of(got)), values(src)) << dtype_name(wt);
  }
}

TEST_P(BackendOps, UnknownWeightIsAnErrorNamingIt) {
  try {
    backend_->weight("model.no_such.weight");
    FAIL() << "weight() of an unknown name did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.no_such.weight"), std::string::npos) << e.what();
  }
}

// A shape mismatch is a sonde::Error that names the node and the shapes.
TEST_P(BackendOps, ShapeMismatchIsAnErrorNamingTheNode) {
  const Node n = make_node(OpKind::Linear, Shape{2, 3}, "blocks.4.attn.q_proj");
  const std::vector<Arg> args{{random_tensor(DType::f32, Shape{2, 5}, 26)}, {random_tensor(DType::f32, Shape{3, 4}, 27), true}};
  try {
    run_on(*backend_, n, args);
    FAIL() << "a Linear with x [2, 5] and W [3, 4] did not throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("blocks.4.attn.q_proj"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
  }
}

// The collectives on one process (the sharded backend without mpiexec is a job of one rank):
// the identity, and the kept part for a gather; backends without a process group decline them.
TEST_P(BackendOps, Collectives) {
  const Tensor x = random_tensor(DType::f32, Shape{2, 5, 6}, 40);
  compare(make_node(OpKind::AllReduceSum, Shape{2, 5, 6}), {{Tensor::copy_of(x.view())}});
  Node g = make_node(OpKind::AllGather, Shape{2, 5, 4});
  g.params.axis = 2;
  g.params.gathered = 4;
  g.params.keep_begin = 1;
  g.params.keep_end = 5;
  compare(g, {{Tensor::copy_of(x.view())}});
}

// Attention over a shard's heads: 7 query heads from global head 5, in groups of 4 per kv head,
// read kv heads 1 (heads 5..7) and 2 (8..11) of the 2 held from kv head 1: runs of 3 and 4
// heads, which the optimised kernels' contiguous groups cannot express.
TEST_P(BackendOps, AttentionOverAShardsHeads) {
  for (OpKind op : {OpKind::Attention, OpKind::AttentionPattern}) {
    const std::int64_t B = 2, T = 3, S = 5, d = 8;
    Node n = make_node(op, op == OpKind::Attention ? Shape{B, T, 7, d} : Shape{B, T, 7, S});
    n.params.causal = true;
    n.params.q_head0 = 5;
    n.params.kv_head0 = 1;
    n.params.kv_group = 4;
    Tensor mask = Tensor(DType::u8, Shape{B, S});
    for (std::int64_t i = 0; i < B * S; ++i) mask.data<std::uint8_t>()[i] = i != 5;  // row 1's first key is padding
    SCOPED_TRACE(std::string(op_name(op)));
    compare(n, {{random_tensor(DType::f32, Shape{B, T, 7, d}, 41)},
                {random_tensor(DType::f32, Shape{B, S, 2, d}, 42)},
                {random_tensor(DType::f32, Shape{B, S, 2, d}, 43)},
                {mask}});
  }
}

INSTANTIATE_TEST_SUITE_P(AllBackends, BackendOps, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

// The suite above runs on whatever is found; make sure the two backends built here are among it.
TEST(BackendDiscovery, FindsReferenceAndCpuBlas) {
  const auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "reference"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu-blas"), names.end());
  for (const auto& r : registry().rejected()) std::cout << "[ note ] rejected " << r.path << ": " << r.reason << "\n";
}

}  // namespace
}  // namespace sonde::test
