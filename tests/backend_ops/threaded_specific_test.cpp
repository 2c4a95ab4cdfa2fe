// Tests of the threaded backend beyond the shared suite: q8 error bounds from the quantisation
// formula, bit-determinism for a fixed thread count, tile-edge shapes, long attention, and every
// ISA path this CPU can run (forced through SONDE_THREADED_ISA). Expected values come from the
// reference backend or from formulas, never from threaded itself.
#include "op_harness.h"
#include "test_scale.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace sonde::test {
namespace {

constexpr double kThreadedTol = 1e-5;

std::shared_ptr<Backend> threaded(int threads, const std::string& weights = "native") {
  return make_backend("threaded", threads, weights, "f32");
}

// Sets SONDE_THREADED_ISA for one scope.
struct IsaScope {
  explicit IsaScope(const std::string& isa) { setenv("SONDE_THREADED_ISA", isa.c_str(), 1); }
  ~IsaScope() { unsetenv("SONDE_THREADED_ISA"); }
};

double vs_reference(Backend& b, const Node& n, const std::vector<Arg>& args) {
  auto ref = make_backend("reference");
  const Tensor want = run_on(*ref, n, args);
  const Tensor got = run_on(b, n, args);
  EXPECT_TRUE(all_finite(got));
  return normalised_error(got, want);
}

Node linear_node(std::int64_t M, std::int64_t N) { return make_node(OpKind::Linear, Shape{M, N}); }

std::vector<Arg> linear_args(std::int64_t M, std::int64_t K, std::int64_t N, DType wt, bool bias, unsigned seed) {
  std::vector<Arg> a{{random_tensor(DType::f32, Shape{M, K}, seed)}, {random_tensor(wt, Shape{N, K}, seed + 1), true}};
  if (bias) a.push_back({random_tensor(wt, Shape{N}, seed + 2), true});
  return a;
}

// Max over elements of |got - ref| / ((K + 2) u sum_k |x_k w_k|), u = 2^-24: the classical
// forward-error bound of an f32 dot product of length K plus the bias add and the reference's
// rounding. <= 1 means within the bound. (A normalised error can blow up here: with N = 1 the only
// output may nearly cancel.) One value per backend in `bs`: the reference output and the bounds
// are computed once for all of them (EveryAvailableIsaMatchesReference checks every ISA).
std::vector<double> linear_errors_vs_bound(const std::vector<Backend*>& bs, std::int64_t M, std::int64_t K,
                                           std::int64_t N, const std::vector<Arg>& args) {
  const Tensor want = run_on(*make_backend("reference"), linear_node(M, N), args);
  const auto x = values(args[0].t), w = values(args[1].t), r = values(want);
  const auto bias = args.size() == 3 ? values(args[2].t) : std::vector<float>{};
  std::vector<double> bound(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double mag = bias.empty() ? 0.0 : std::fabs(double(bias[std::size_t(n)]));
      for (std::int64_t k = 0; k < K; ++k) mag += std::fabs(double(x[std::size_t(m * K + k)]) * w[std::size_t(n * K + k)]);
      bound[std::size_t(m * N + n)] = double(K + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
    }
  std::vector<double> worst;
  for (Backend* b : bs) {
    const auto g = values(run_on(*b, linear_node(M, N), args));
    double e = 0;
    for (std::size_t i = 0; i < bound.size(); ++i) e = std::max(e, std::fabs(double(g[i]) - r[i]) / bound[i]);
    worst.push_back(e);
  }
  return worst;
}

double linear_error_vs_bound(Backend& b, std::int64_t M, std::int64_t K, std::int64_t N, const std::vector<Arg>& args) {
  return linear_errors_vs_bound({&b}, M, K, N, args)[0];
}

// Backends to check on the same inputs, each with the name its failures carry.
struct Checked {
  std::string name;
  Backend* b;
};

void expect_within_bound(const std::vector<Checked>& bs, std::int64_t M, std::int64_t K, std::int64_t N,
                         const std::vector<Arg>& args) {
  std::vector<Backend*> ptrs;
  for (const auto& c : bs) ptrs.push_back(c.b);
  const auto errors = linear_errors_vs_bound(ptrs, M, K, N, args);
  for (std::size_t i = 0; i < bs.size(); ++i) EXPECT_LE(errors[i], 1.0) << bs[i].name;
}

// M: the GEMV row groups (1..3, several groups) and past them; N around the 4 row streams and a
// GEMM task's rows; K around the 16/32-lane loops, the q8 block (32) and 256.
void check_tile_edges(const std::vector<Checked>& bs) {
  for (DType wt : {DType::f32, DType::bf16, DType::f16})
    for (std::int64_t M : {1, 3, 4, 7, 9, 17, 511, 512, 519})
      for (std::int64_t N : {1, 31, 33, 65, 97})
        for (std::int64_t K : {1, 15, 17, 33, 257, 300}) {
          SCOPED_TRACE(fmt::format("{} M={} N={} K={}", dtype_name(wt), M, N, K));
          expect_within_bound(bs, M, K, N, linear_args(M, K, N, wt, N % 2 == 1, 40));
        }
}

// The GEMV reads a task's rows as 4 interleaved runs (block i takes row i of each run) with the
// rows left over one at a time: N here gives runs of 1 to 100+ rows with 0 to 3 left over, for
// every x-row grouping (1, 2, 3 and 3 + 1/2) and K with and without a partial step.
void check_gemv_streams(const std::vector<Checked>& bs) {
  for (DType wt : {DType::bf16, DType::f16, DType::f32})
    for (std::int64_t M : {1, 2, 3, 4, 5})
      for (std::int64_t N : {5, 203, 1001})
        for (std::int64_t K : {40, 300}) {
          SCOPED_TRACE(fmt::format("GEMV {} M={} N={} K={}", dtype_name(wt), M, N, K));
          expect_within_bound(bs, M, K, N, linear_args(M, K, N, wt, N % 2 == 1, 41));
        }
}

struct ThreadedAttnCase {
  std::int64_t B, T, S, nh, nkv, d;
  bool causal, mask;
};

Tensor mask_with_holes(std::int64_t B, std::int64_t S) {
  std::vector<int> m(static_cast<std::size_t>(B * S), 1);
  for (std::int64_t u = 0; u < S; u += 37) m[static_cast<std::size_t>(u)] = 0;           // row 0: scattered pads
  for (std::int64_t u = 0; u < 5 && B > 1; ++u) m[static_cast<std::size_t>(S + u)] = 0;  // row 1: left padding
  return bytes(Shape{B, S}, m);
}

// Row 0 masks its last slot (under Dream's pairwise rule the last query sees no key at all);
// row 1 is left-padded by 300 slots, so a whole run of 256 keys is masked for it.
Tensor mask_with_a_masked_run(std::int64_t B, std::int64_t S) {
  std::vector<int> m(static_cast<std::size_t>(B * S), 1);
  m[static_cast<std::size_t>(S - 1)] = 0;
  for (std::int64_t u = 0; u < std::min<std::int64_t>(300, S) && B > 1; ++u) m[static_cast<std::size_t>(S + u)] = 0;
  return bytes(Shape{B, S}, m);
}

std::vector<Arg> attention_args(const ThreadedAttnCase& c, bool masked_run = false) {
  std::vector<Arg> args{{random_tensor(DType::f32, Shape{c.B, c.T, c.nh, c.d}, 50, -3, 3)},
                        {random_tensor(DType::f32, Shape{c.B, c.S, c.nkv, c.d}, 51, -3, 3)},
                        {random_tensor(DType::f32, Shape{c.B, c.S, c.nkv, c.d}, 52)}};
  if (c.mask) args.push_back({masked_run ? mask_with_a_masked_run(c.B, c.S) : mask_with_holes(c.B, c.S)});
  return args;
}

// S = 300 spans several 64-key blocks and query blocks, so the online softmax rescales. Up to
// 16 query rows (decode) the keys are split into runs of 256 whose states are merged: S = 600
// and 700 give three runs, the last one short; d = 24 and 40 leave a partial vector per key.
void check_long_attention(Backend& b) {
  const ThreadedAttnCase cases[] = {{2, 300, 300, 4, 2, 64, true, true},  {1, 300, 300, 4, 1, 64, false, true},
                            {2, 5, 300, 4, 2, 64, true, true},    {1, 1, 300, 6, 2, 32, true, false},
                            {1, 70, 300, 2, 2, 16, false, false}, {1, 1, 600, 14, 2, 64, true, false},
                            {2, 1, 700, 4, 2, 128, true, true},   {2, 16, 600, 6, 3, 24, false, true},
                            {1, 3, 530, 4, 4, 40, true, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("T={} S={} nh={} nkv={} d={} causal={} mask={}", c.T, c.S, c.nh, c.nkv, c.d, c.causal, c.mask));
    Node n = make_node(OpKind::Attention, Shape{c.B, c.T, c.nh, c.d});
    n.params.causal = c.causal;
    EXPECT_LE(vs_reference(b, n, attention_args(c)), kThreadedTol);
  }
  // A run with no allowed key adds nothing to the merge; a query with none at all gives zeros.
  for (const bool causal : {true, false}) {
    const ThreadedAttnCase c{2, 2, 600, 4, 2, 32, causal, true};
    SCOPED_TRACE(fmt::format("a masked run, causal={}", causal));
    Node n = make_node(OpKind::Attention, Shape{c.B, c.T, c.nh, c.d});
    n.params.causal = causal;
    const auto args = attention_args(c, true);
    EXPECT_LE(vs_reference(b, n, args), kThreadedTol);
    if (!causal) {
      const Tensor got = run_on(b, n, args);
      const float* last_row = got.data<float>() + (c.T - 1) * c.nh * c.d;  // batch row 0, last query
      for (std::int64_t j = 0; j < c.nh * c.d; ++j) ASSERT_EQ(last_row[j], 0.0f) << "element " << j;
    }
  }
}

void check_elementwise(Backend& b) {
  for (OpKind op : {OpKind::Add, OpKind::SiluMul})
    for (std::int64_t len : {1, 17, 40000}) {
      const Shape s{1, len};
      SCOPED_TRACE(fmt::format("{} {}", op_name(op), len));
      EXPECT_LE(vs_reference(b, make_node(op, s), {{random_tensor(DType::f32, s, 60, -20, 20)}, {random_tensor(DType::f32, s, 61)}}), kThreadedTol);
    }
}

std::vector<double> q8_bounds(const Tensor& x, const Tensor& w, std::int64_t M, std::int64_t K, std::int64_t N);

// Sets SONDE_THREADED_LINEAR for one scope.
struct LinearScope {
  explicit LinearScope(const std::string& mode) { setenv("SONDE_THREADED_LINEAR", mode.c_str(), 1); }
  ~LinearScope() { unsetenv("SONDE_THREADED_LINEAR"); }
};

constexpr std::int64_t kRowCounts[] = {1, 2, 3, 7, 16, 63, 64, 255, 511, 512, 513};

// Every Linear path, forced and automatic, at the row counts around the GEMV's groups of 3 and
// the old 512-row switch, with odd N and K, against the f32 forward-error bound.
TEST(Threaded, EveryLinearPathAtEveryRowCountMatchesReference) {
  for (const std::string mode : {"gemv", "gemm", "auto"}) {
    LinearScope scope(mode);
    auto b = threaded(2);
    for (std::int64_t M : kRowCounts)
      for (DType wt : {DType::bf16, DType::f32}) {
        const std::int64_t K = 67, N = 37;
        SCOPED_TRACE(fmt::format("{} {} M={} K={} N={}", mode, dtype_name(wt), M, K, N));
        EXPECT_LE(linear_error_vs_bound(*b, M, K, N, linear_args(M, K, N, wt, true, 42)), 1.0);
      }
  }
}

double q8_error_vs_arithmetic(Backend& b, std::int64_t M, std::int64_t K, std::int64_t N, const std::vector<Arg>& args);

// A threaded backend with q8 weights on every ISA this CPU has, for each Linear mode given.
template <typename F> void on_every_q8_backend(std::initializer_list<const char*> modes, F fn) {
  for (const std::string isa : {"avx512", "avx2", "scalar"})
    for (const std::string mode : modes) {
      IsaScope isa_scope(isa);
      LinearScope scope(mode);
      std::shared_ptr<Backend> b;
      try {
        b = threaded(2, "q8");
      } catch (const Error&) {
        continue;  // EveryAvailableIsaMatchesReference reports which ISAs this CPU lacks
      }
      SCOPED_TRACE(fmt::format("q8 ISA {} {}", isa, mode));
      fn(*b);
    }
}

// q8 weights on every ISA and every Linear path, at the row counts above: each output is
// x . dequant(W) to f32 rounding, and within the quantisation bound of the reference's x . W.
TEST(Threaded, Q8LinearAtEveryRowCountMatchesReference) {
  const std::int64_t K = 67, N = 37;
  struct Case {
    std::int64_t M;
    std::vector<Arg> args;
    std::vector<float> want;     // the reference backend's x . W
    std::vector<double> bound;   // per element, from q8_bounds
  };
  std::vector<Case> cases;  // the reference and the bounds once, not once per backend
  for (std::int64_t M : kRowCounts) {
    auto args = linear_args(M, K, N, DType::bf16, false, 43);
    auto want = values(run_on(*make_backend("reference"), linear_node(M, N), args));
    auto bound = q8_bounds(args[0].t, args[1].t, M, K, N);
    cases.push_back({M, std::move(args), std::move(want), std::move(bound)});
  }
  on_every_q8_backend({"gemv", "gemm", "auto"}, [&](Backend& b) {
    for (const auto& c : cases) {
      SCOPED_TRACE(fmt::format("M={}", c.M));
      EXPECT_LE(q8_error_vs_arithmetic(b, c.M, K, N, c.args), 1.0);
      const auto g = values(run_on(b, linear_node(c.M, N), c.args));
      for (std::size_t i = 0; i < g.size(); ++i)
        ASSERT_LE(std::fabs(double(g[i]) - c.want[i]), c.bound[i]) << "element " << i;
    }
  });
}

TEST(Threaded, UnknownLinearModeIsAnErrorNamingIt) {
  LinearScope scope("blas");
  try {
    threaded(1);
    FAIL() << "SONDE_THREADED_LINEAR=blas was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blas"), std::string::npos) << e.what();
  }
}

// Batch invariance of the Linear: each x row's output is bit-identical whether it runs alone
// (M = 1, the decode GEMV), among a few rows or among many, on either path, with 1 or 2 threads;
// K within one of the tiled kernels' K blocks (1024) and over two, neither a multiple of 16.
TEST(Threaded, LinearRowsDoNotDependOnTheirBatch) {
  for (const std::int64_t K : {300, 1100})
    for (const std::string weights : {"native", "q8"})
      for (DType wt : {DType::bf16, DType::f32}) {
        SCOPED_TRACE(fmt::format("K={}", K));
        const std::int64_t N = 203, M = 70;
        const auto args = linear_args(M, K, N, wt, true, 44);
        std::vector<Tensor> outs;
        std::vector<std::string> what;
        for (const std::string mode : {"gemv", "gemm", "auto"})
          for (int threads : {1, 2}) {
            LinearScope scope(mode);
            outs.push_back(run_on(*threaded(threads, weights), linear_node(M, N), args));
            what.push_back(fmt::format("{} rows, {}, {} threads", M, mode, threads));
          }
        // Rows 5 and 69 alone and row 5 in a batch of 4.
        LinearScope scope("auto");
        auto b = threaded(2, weights);
        const auto xs = values(args[0].t);
        for (std::int64_t row : {5, 69}) {
          std::vector<Arg> one = args;
          one[0] = {floats(DType::f32, Shape{1, K}, std::vector<float>(xs.begin() + row * K, xs.begin() + (row + 1) * K))};
          const Tensor alone = run_on(*b, linear_node(1, N), one);
          for (std::size_t i = 0; i < outs.size(); ++i)
            ASSERT_EQ(std::memcmp(alone.data<float>(), outs[i].data<float>() + row * N, N * sizeof(float)), 0)
                << weights << " " << dtype_name(wt) << " row " << row << " alone vs " << what[i];
        }
        std::vector<Arg> four = args;
        four[0] = {floats(DType::f32, Shape{4, K}, std::vector<float>(xs.begin() + 3 * K, xs.begin() + 7 * K))};
        const Tensor some = run_on(*b, linear_node(4, N), four);
        ASSERT_EQ(std::memcmp(some.data<float>() + 2 * N, outs[0].data<float>() + 5 * N, N * sizeof(float)), 0)
            << weights << " " << dtype_name(wt) << " row 5 among 4";
      }
}

// Batch invariance row by row at every row count a step-level engine's decode forwards have
// (M = 1..9 as requests join and leave the running batch) and a prefill-sized one (40): each row's
// output is bit-identical to the row alone (M = 1, 1 thread, GEMV), on forced GEMV, forced GEMM and
// the automatic path, with 1 to 4 threads, on every ISA this CPU runs, native bf16/f32 and q8
// weights; N a vocabulary head's width (2048, 4096) and odd (2047, 203), K a multiple of the
// kernels' 32-element step and not.
TEST(Threaded, LinearRowsAtEveryRowCountAndThreadCountAreTheRowAlone) {
  struct Case {
    std::int64_t K, N;
  };
  Case cases[] = {{256, 4096}, {256, 2048}, {300, 2047}, {67, 203}, {1100, 203}};
  // SONDE_TEST_SCALE (test_scale.h) narrows the wide ones (4096 to 1024 at 0.25), odd N kept odd:
  // still many column blocks for every thread count.
  for (Case& c : cases) c.N = scaled(c.N, 203) | (c.N & 1);
  const std::int64_t row_counts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 40}, Mmax = 40;
  struct Weights {
    std::string weights;
    DType wt;
  };
  const Weights kinds[] = {{"native", DType::bf16}, {"native", DType::f32}, {"q8", DType::bf16}};
  std::vector<std::string> failures;
  std::size_t checked = 0;
  for (const std::string isa : {"avx512", "avx2", "scalar"})
    for (const Weights& kind : kinds) {
      IsaScope isa_scope(isa);
      std::shared_ptr<Backend> alone;
      try {
        LinearScope scope("gemv");
        alone = threaded(1, kind.weights);
      } catch (const Error&) {
        continue;  // an ISA this CPU lacks
      }
      struct Run {
        std::string what;
        std::shared_ptr<Backend> b;
      };
      std::vector<Run> runs;
      for (const std::string mode : {"gemv", "gemm", "auto"})
        for (int threads : {1, 2, 3, 4}) {
          LinearScope scope(mode);
          runs.push_back({fmt::format("{}, {} threads", mode, threads), threaded(threads, kind.weights)});
        }
      for (const Case& c : cases) {
        const bool bias = c.N % 2 == 1;
        const auto args = linear_args(Mmax, c.K, c.N, kind.wt, bias, 45);
        const auto xs = values(args[0].t);
        const auto x_rows = [&](std::int64_t m0, std::int64_t M) {
          std::vector<Arg> a = args;
          a[0] = {floats(DType::f32, Shape{M, c.K}, std::vector<float>(xs.begin() + m0 * c.K, xs.begin() + (m0 + M) * c.K))};
          return a;
        };
        std::vector<std::vector<float>> want;  // each row alone
        for (std::int64_t r = 0; r < Mmax; ++r) want.push_back(values(run_on(*alone, linear_node(1, c.N), x_rows(r, 1))));
        for (const Run& run : runs)
          for (std::int64_t M : row_counts) {
            const auto got = values(run_on(*run.b, linear_node(M, c.N), x_rows(0, M)));
            for (std::int64_t r = 0; r < M; ++r, ++checked) {
              const float* g = got.data() + r * c.N;
              if (std::memcmp(g, want[std::size_t(r)].data(), std::size_t(c.N) * sizeof(float)) == 0) continue;
              std::int64_t n = 0, diff = 0;
              for (std::int64_t i = c.N - 1; i >= 0; --i)
                if (g[i] != want[std::size_t(r)][std::size_t(i)]) n = i, ++diff;
              failures.push_back(fmt::format("{} {} {} K={} N={}: row {} of M={} ({}) differs from the row alone in {} "
                                             "outputs, first n={}: {:a} vs {:a}",
                                             isa, kind.weights, dtype_name(kind.wt), c.K, c.N, r, M, run.what, diff, n,
                                             g[n], want[std::size_t(r)][std::size_t(n)]));
            }
          }
      }
    }
  EXPECT_GT(checked, 0u);
  for (std::size_t i = 0; i < failures.size() && i < 30; ++i) ADD_FAILURE() << failures[i];
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << checked << " rows differ from the row alone";
}

// Many rows over a long K: the GEMV visits x in panels of rows (gemv_avx512.cpp, kPanelBytes: 87
// rows at K = 3000), so rows 86-88 and 173-175 sit on either side of a panel's edge. Every row equals
// the row alone, bit for bit, on one and two threads.
TEST(Threaded, LinearRowsAcrossXPanelsAreTheRowAlone) {
  const std::int64_t M = 200, K = 3000, N = 37;
  const auto args = linear_args(M, K, N, DType::bf16, true, 46);
  const auto xs = values(args[0].t);
  LinearScope scope("gemv");
  for (int threads : {1, 2}) {
    auto b = threaded(threads);
    const auto got = values(run_on(*b, linear_node(M, N), args));
    for (std::int64_t r = 0; r < M; ++r) {
      std::vector<Arg> one = args;
      one[0] = {floats(DType::f32, Shape{1, K}, std::vector<float>(xs.begin() + r * K, xs.begin() + (r + 1) * K))};
      const auto want = values(run_on(*b, linear_node(1, N), one));
      ASSERT_EQ(std::memcmp(got.data() + r * N, want.data(), N * sizeof(float)), 0) << "row " << r << ", " << threads << " threads";
    }
  }
}

// Batch invariance of attention: a prompt of L tokens alone (no mask) and left-padded in a batch
// of two (mask) gives bit-identical rows, for L below and above the 16-row query block, keys over
// more than one run of 256, causal (Qwen) and bidirectional (Dream); and a decode step (one query)
// over its keys alone and behind padding.
// A prefill's rows go through the transposed-keys dot products (many rows share a key block), a
// one-query step through the per-key ones (four rows at a time in both kernels): d = 40 is a head
// size that is not whole vectors, d = 128 (Dream-7B's, LLaDA's) takes the weighted sum in two slabs.
TEST(Threaded, AttentionRowsDoNotDependOnTheirBatch) {
  const std::int64_t nh = 4, nkv = 2;
  for (const std::int64_t d : {64, 40, 128})
  for (const bool causal : {true, false})
    for (const std::int64_t L : {5, 16, 17, 100, 300}) {
      const std::int64_t pad = 37, S = L + pad;  // the batch is as wide as its other, longer prompt
      SCOPED_TRACE(fmt::format("L={} causal={} d={}", L, causal, d));
      const Tensor q = random_tensor(DType::f32, Shape{1, L, nh, d}, 60, -3, 3);
      const Tensor k = random_tensor(DType::f32, Shape{1, L, nkv, d}, 61, -3, 3);
      const Tensor v = random_tensor(DType::f32, Shape{1, L, nkv, d}, 62);
      Node alone = make_node(OpKind::Attention, Shape{1, L, nh, d});
      alone.params.causal = causal;
      // Batch row 1 is the prompt behind `pad` slots of padding; row 0 is another prompt.
      const auto widen = [&](const Tensor& t, std::int64_t heads, unsigned seed) {
        std::vector<float> all = values(random_tensor(DType::f32, Shape{2, S, heads, d}, seed, -3, 3));
        const auto mine = values(t);
        std::copy(mine.begin(), mine.end(), all.begin() + (S + pad) * heads * d);
        return floats(DType::f32, Shape{2, S, heads, d}, all);
      };
      std::vector<int> mask(static_cast<std::size_t>(2 * S), 1);
      for (std::int64_t u = 0; u < pad; ++u) mask[static_cast<std::size_t>(S + u)] = 0;
      Node batched = make_node(OpKind::Attention, Shape{2, S, nh, d});
      batched.params.causal = causal;
      for (int threads : {1, 2}) {
        auto b = threaded(threads);
        const Tensor a = run_on(*b, alone, {{q}, {k}, {v}});
        const Tensor g = run_on(*b, batched, {{widen(q, nh, 63)}, {widen(k, nkv, 64)}, {widen(v, nkv, 65)}, {bytes(Shape{2, S}, mask)}});
        ASSERT_EQ(std::memcmp(a.data<float>(), g.data<float>() + (S + pad) * nh * d, L * nh * d * sizeof(float)), 0)
            << threads << " threads";
        // Decode: the prompt's last row as a one-query step over its keys.
        Node step = make_node(OpKind::Attention, Shape{1, 1, nh, d});
        step.params.causal = causal;
        const auto qv = values(q);
        const Tensor last = floats(DType::f32, Shape{1, 1, nh, d}, std::vector<float>(qv.end() - nh * d, qv.end()));
        const Tensor one = run_on(*b, step, {{last}, {k}, {v}});
        ASSERT_EQ(std::memcmp(one.data<float>(), a.data<float>() + (L - 1) * nh * d, nh * d * sizeof(float)), 0)
            << "one-query step vs the prefill's last row, " << threads << " threads";
      }
    }
}

TEST(Threaded, TileEdgeShapesMatchReference) { check_tile_edges({{"threaded", threaded(2).get()}}); }

TEST(Threaded, GemvRowStreamsMatchReference) {
  const auto one = threaded(1), two = threaded(2);
  check_gemv_streams({{"1 thread", one.get()}, {"2 threads", two.get()}});
}

TEST(Threaded, LongAttentionMatchesReference) { check_long_attention(*threaded(2)); }

// Every ISA this CPU has, forced in turn; the description names the one in use. The Linear
// shapes run on all of them at once: one reference output and one bound per shape.
TEST(Threaded, EveryAvailableIsaMatchesReference) {
  std::vector<std::shared_ptr<Backend>> owned;
  std::vector<Checked> isas;
  for (const std::string isa : {"avx512", "avx2", "scalar"}) {
    IsaScope scope(isa);
    std::shared_ptr<Backend> b;
    try {
      b = threaded(2);
    } catch (const Error& e) {
      std::cout << "[ note ] ISA " << isa << " not available here: " << e.what() << "\n";
      EXPECT_NE(isa, "scalar") << "the scalar path must always be available";
      continue;
    }
    EXPECT_NE(b->info().description.find(isa), std::string::npos) << b->info().description;
    owned.push_back(b);
    isas.push_back({"ISA " + isa, b.get()});
  }
  check_tile_edges(isas);
  check_gemv_streams(isas);
  for (const auto& c : isas) {
    SCOPED_TRACE(c.name);
    check_long_attention(*c.b);
    check_elementwise(*c.b);
  }
}

TEST(Threaded, UnknownIsaIsAnErrorNamingIt) {
  IsaScope scope("avx1024");
  try {
    threaded(1);
    FAIL() << "SONDE_THREADED_ISA=avx1024 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx1024"), std::string::npos) << e.what();
  }
}

TEST(Threaded, UnknownWeightsModeIsAnErrorNamingIt) {
  try {
    threaded(1, "q3");
    FAIL() << "weights q3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q3"), std::string::npos) << e.what();
  }
}

// Same thread count, same bits; and since no sum is split by thread count (a Linear's K never is,
// attention's keys in runs of a fixed length), 1 and 2 threads agree too.
TEST(Threaded, SameBitsForAnyThreadCount) {
  Node attn = make_node(OpKind::Attention, Shape{2, 130, 4, 64});
  attn.params.causal = true;
  const std::vector<Arg> attn_args{{random_tensor(DType::f32, Shape{2, 130, 4, 64}, 70)},
                                   {random_tensor(DType::f32, Shape{2, 200, 2, 64}, 71)},
                                   {random_tensor(DType::f32, Shape{2, 200, 2, 64}, 72)},
                                   {mask_with_holes(2, 200)}};
  const auto gemm_args = linear_args(530, 300, 130, DType::bf16, true, 73);
  const auto gemv_chunk_args = linear_args(67, 300, 130, DType::bf16, true, 75);  // GEMV, x rows in groups
  const auto gemv_args = linear_args(1, 300, 130, DType::bf16, true, 74);
  // Decode: the keys are split into runs of a fixed length, whatever the thread count.
  Node decode_attn = make_node(OpKind::Attention, Shape{2, 1, 4, 64});
  decode_attn.params.causal = true;
  const auto decode_attn_args = attention_args({2, 1, 700, 4, 2, 64, true, true});
  const std::pair<Node, const std::vector<Arg>*> runs[] = {{attn, &attn_args},
                                                           {decode_attn, &decode_attn_args},
                                                           {linear_node(530, 130), &gemm_args},
                                                           {linear_node(67, 130), &gemv_chunk_args},
                                                           {linear_node(1, 130), &gemv_args}};
  for (const std::string weights : {"native", "q8"})
    for (const auto& [node, args] : runs) {
      SCOPED_TRACE(std::string(op_name(node.op)) + " " + node.shape.str() + " " + weights);
      std::vector<Tensor> outs;
      for (int threads : {1, 1, 2, 2}) outs.push_back(run_on(*threaded(threads, weights), node, *args));
      const std::size_t n = outs[0].view().nbytes();
      EXPECT_EQ(std::memcmp(outs[0].view().data, outs[1].view().data, n), 0) << "1 thread, two runs";
      EXPECT_EQ(std::memcmp(outs[2].view().data, outs[3].view().data, n), 0) << "2 threads, two runs";
      EXPECT_EQ(std::memcmp(outs[0].view().data, outs[2].view().data, n), 0) << "1 vs 2 threads";
    }
}

// Linears sharing x (q/k/v, gate/up) as the executor hands them over: one parallel region over
// all their weights' rows for a streaming GEMV (native or q8), node by node otherwise (GEMM rows). Each output
// must be bit-identical to the node's own run(), which the other tests hold to the reference.
TEST(Threaded, SiblingLinearsAreTheirOwnRuns) {
  struct Case {
    std::int64_t M, K;
    std::vector<std::int64_t> N;
    DType wt;
    std::string weights;
  };
  const Case cases[] = {
      {1, 300, {130, 16, 16}, DType::bf16, "native"},  // decode q/k/v: tasks cross from one weight into the next
      {1, 40, {3, 1001, 5}, DType::f16, "native"},
      {3, 300, {203, 203}, DType::f32, "native"},       // gate/up with x rows in groups
      {1, 8, {1, 1}, DType::bf16, "native"},
      {512, 40, {24, 40}, DType::bf16, "native"},       // GEMM: one by one
      {1, 300, {130, 16, 16}, DType::bf16, "q8"},       // q8 decode: one region, as native
      {1, 40, {3, 1001, 5}, DType::f16, "q8"},          // K padded to the q8 block
      {3, 300, {203, 203}, DType::f32, "q8"},           // q8 with x rows in groups
      {512, 40, {24, 40}, DType::bf16, "q8"},           // q8 GEMM: one by one
  };
  for (const Case& c : cases)
    for (int threads : {1, 2}) {
      SCOPED_TRACE(fmt::format("M={} K={} N0={} {} {} {} threads", c.M, c.K, c.N[0], dtype_name(c.wt), c.weights, threads));
      auto b = threaded(threads, c.weights);
      const Tensor x = random_tensor(DType::f32, Shape{c.M, c.K}, 90);
      std::vector<Tensor> w, bias;
      std::vector<Node> nodes;
      std::vector<std::vector<TensorView>> ins;
      std::vector<Tensor> outs;
      for (std::size_t i = 0; i < c.N.size(); ++i) {
        w.push_back(random_tensor(c.wt, Shape{c.N[i], c.K}, 91 + static_cast<unsigned>(i)));
        bias.push_back(random_tensor(c.wt, Shape{c.N[i]}, 95 + static_cast<unsigned>(i)));
        nodes.push_back(linear_node(c.M, c.N[i]));
        const bool with_bias = i % 2 == 0;
        ins.push_back({x.view(), b->upload(fmt::format("sib{}.weight", i), w.back().view(), Split::None)});
        if (with_bias) ins.back().push_back(b->upload(fmt::format("sib{}.bias", i), bias.back().view(), Split::None));
        outs.emplace_back(DType::f32, nodes.back().shape);
        std::memset(outs.back().view().data, 0xFF, outs.back().view().nbytes());  // as a reused buffer may be
      }
      std::vector<const Node*> node_ptrs;
      std::vector<TensorView> out_views;
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        node_ptrs.push_back(&nodes[i]);
        out_views.push_back(outs[i].view());
      }
      b->run_siblings(node_ptrs, ins, out_views);
      b->sync();
      for (std::size_t i = 0; i < nodes.size(); ++i) {
        Tensor own(DType::f32, nodes[i].shape);
        b->run(nodes[i], ins[i], own.view());
        b->sync();
        EXPECT_EQ(std::memcmp(own.view().data, outs[i].view().data, own.view().nbytes()), 0) << "sibling " << i;
      }
    }
}

// The q8 error bound from the formula, per output element. With blocks b of 32 along K and
// sw_b = max|w_b| / 127, rounding gives |w - q sw| <= sw_b / 2; x is not quantised (W8A16), so
// |x . w^ - x . w| <= sum_k |x_k| sw_b / 2, plus the f32 rounding of w^ = float(q) * s and of the
// sum: (K + 2) 2^-24 sum_k |x_k| (|w_k| + sw_b).
std::vector<double> q8_bounds(const Tensor& x, const Tensor& w, std::int64_t M, std::int64_t K, std::int64_t N) {
  const auto xv = values(x), wv = values(w);
  const auto block_max = [&](const std::vector<float>& v, std::int64_t row, std::int64_t b) {
    double mx = 0;
    for (std::int64_t k = b * 32; k < std::min(K, b * 32 + 32); ++k) mx = std::max(mx, std::fabs(double(v[std::size_t(row * K + k)])));
    return mx / 127;
  };
  std::vector<double> bound(static_cast<std::size_t>(M * N));
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double e = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double sw = block_max(wv, n, k / 32);
        const double a = std::fabs(double(xv[std::size_t(m * K + k)])), c = std::fabs(double(wv[std::size_t(n * K + k)]));
        e += a * sw / 2;
        mag += a * (c + sw);
      }
      bound[std::size_t(m * N + n)] = e + double(K + 2) * std::ldexp(1.0, -24) * mag;
    }
  return bound;
}

TEST(Threaded, Q8LinearWithinTheQuantisationBound) {
  struct Case { std::int64_t M, K, N; };
  // An odd number of 32-blocks per row (K = 20, 90, 900) leaves the two-block step a single
  // block at the end; N = 203 and 1001 give the decode path (one x row) runs of rows with some
  // left over.
  for (const Case c : {Case{1, 300, 70}, Case{5, 64, 33}, Case{33, 100, 65}, Case{1, 90, 203}, Case{3, 20, 9},
                       Case{1, 900, 1001}, Case{4, 900, 37}})
    for (DType wt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(fmt::format("M={} K={} N={} {}", c.M, c.K, c.N, dtype_name(wt)));
      const auto args = linear_args(c.M, c.K, c.N, wt, false, 80);
      const Tensor want = run_on(*make_backend("reference"), linear_node(c.M, c.N), args);
      const Tensor got = run_on(*threaded(2, "q8"), linear_node(c.M, c.N), args);
      const auto bound = q8_bounds(args[0].t, args[1].t, c.M, c.K, c.N);
      const auto g = values(got), r = values(want);
      double worst = 0, mean_err = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        const double err = std::fabs(double(g[i]) - r[i]);
        EXPECT_LE(err, bound[i]) << "element " << i;
        worst = std::max(worst, err / bound[i]);
        mean_err += err;
      }
      // Quantisation really happened (a native run would have error ~1e-7, far below this).
      EXPECT_GT(mean_err / double(g.size()), 1e-5);
      std::cout << "[ note ] q8 worst error / bound = " << worst << "\n";
    }
}

// q8 rows of v[K] as the backend quantises them (docs/backends.md): per block of 32, s =
// max|v| / 127 and q = round-half-even(v * (127 / max|v|)), all in f32; each weight then stands
// for float(q) * s, rounded to f32 once. Returns those f32 weights, [rows, K].
std::vector<float> q8_dequantised(const std::vector<float>& v, std::int64_t rows, std::int64_t K) {
  std::vector<float> out(v.size());
  for (std::int64_t n = 0; n < rows; ++n)
    for (std::int64_t b = 0; b * 32 < K; ++b) {
      const std::int64_t lo = b * 32, hi = std::min(K, lo + 32);
      float amax = 0;
      for (std::int64_t k = lo; k < hi; ++k) amax = std::max(amax, std::fabs(v[std::size_t(n * K + k)]));
      const float inv = amax > 0 ? 127.0f / amax : 0.0f, s = amax / 127.0f;
      for (std::int64_t k = lo; k < hi; ++k) {
        const float q = std::nearbyint(v[std::size_t(n * K + k)] * inv);
        out[std::size_t(n * K + k)] = q * s;
      }
    }
  return out;
}

// Max over outputs of |got - x . dequant(W)| / ((K + 2) u sum_k |x_k w^_k|), the sum in double:
// <= 1 means the backend computed x . dequant(W) up to f32 rounding. (The quantisation bound is
// far looser and would not see, say, a scale taken from the neighbouring block.)
double q8_error_vs_arithmetic(Backend& b, std::int64_t M, std::int64_t K, std::int64_t N, const std::vector<Arg>& args) {
  const Tensor got = run_on(b, linear_node(M, N), args);
  const auto x = values(args[0].t), w = q8_dequantised(values(args[1].t), N, K), g = values(got);
  double worst = 0;
  for (std::int64_t m = 0; m < M; ++m)
    for (std::int64_t n = 0; n < N; ++n) {
      double want = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = double(x[std::size_t(m * K + k)]) * w[std::size_t(n * K + k)];
        want += p, mag += std::fabs(p);
      }
      const double bound = double(K + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
      worst = std::max(worst, std::fabs(double(g[std::size_t(m * N + n)]) - want) / bound);
    }
  return worst;
}

// The q8 Linear computes x . dequant(W) up to f32 rounding: every ISA, every path, x rows 1 to 4
// (decode and grouped GEMV) and 70 (GEMM tiles), an odd block count with a partial block
// (K = 900), K below one block (20), and rows left over from the 4 row runs (N = 1001).
TEST(Threaded, Q8LinearIsItsQuantisedArithmetic) {
  struct Case { std::int64_t M, K, N; };
  on_every_q8_backend({"gemv", "gemm"}, [](Backend& b) {
    for (const Case c : {Case{1, 900, 1001}, Case{4, 900, 37}, Case{3, 64, 203}, Case{70, 300, 65}, Case{2, 20, 9}}) {
      SCOPED_TRACE(fmt::format("M={} K={} N={}", c.M, c.K, c.N));
      for (DType wt : {DType::bf16, DType::f32})
        EXPECT_LE(q8_error_vs_arithmetic(b, c.M, c.K, c.N, linear_args(c.M, c.K, c.N, wt, false, 81)), 1.0) << dtype_name(wt);
    }
  });
}

// In q8 mode weight() still returns the uploaded values: the source view, not the int8 copy.
TEST(Threaded, Q8WeightsReadBackUnchanged) {
  auto b = threaded(1, "q8");
  const Tensor src = random_tensor(DType::bf16, Shape{13, 40}, 90);
  const TensorView got = b->upload("blocks.0.w", src.view(), Split::None);
  EXPECT_EQ(got.data, src.view().data) << "the upload must not copy";
  EXPECT_EQ(values(Tensor::copy_of(b->weight("blocks.0.w"))), values(src));
}

// Native weights are used in place: upload returns the very same memory.
TEST(Threaded, NativeWeightsAreNotCopied) {
  auto b = threaded(1);
  for (DType wt : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor src = random_tensor(wt, Shape{7, 9}, 91);
    EXPECT_EQ(b->upload("w", src.view(), Split::None).data, src.view().data) << dtype_name(wt);
  }
}

}  // namespace
}  // namespace sonde::test
