// Host edits (edits.h EditFn; the hook for Python functions): through run(), the function sees
// the hook's value, the selected rows, each slot's position and the step, and what it writes is
// what every consumer reads: zeroing the selected rows gives the bits of the built-in zero edit.
#include <sonde/run.h>
#include <sonde/session.h>

#include <gtest/gtest.h>

#include <set>

#include "run_sonde.h"
#include "test_paths.h"

namespace sonde::test {
namespace {

std::unique_ptr<Session> open_tiny(const std::string& arch, const std::filesystem::path& dir, const std::string& backend) {
  const auto out = dir / arch;
  const auto r = run_sonde({"make-model", "--arch", arch, "--preset", "tiny", "--seed", "5", "--out", out.string()});
  if (r.exit_code != 0) throw std::runtime_error("make-model failed: " + r.output);
  return Session::open(SessionOptions{out.string(), backend, 1, plugin_root().string()});
}

RunOptions forward_with(EditSpec e) {
  RunOptions o;
  o.kind = RunKind::Forward;
  o.edits = {std::move(e)};
  return o;
}

RunOptions forward_with_none() {
  RunOptions o;
  o.kind = RunKind::Forward;
  return o;
}

TEST(HostEdit, WritesWhatConsumersReadAndSeesItsContext) {
  for (const auto& backend : built_backends()) {
    SCOPED_TRACE(backend);
    const auto dir = temp_dir();
    auto s = open_tiny("qwen2", dir, backend);
    Request req;
    req.ids = {5, 17, 301, 44, 9};

    int calls = 0;
    EditSpec host;
    host.hook = "blocks.0.hook_resid_post";
    host.op = "host";
    host.positions = {1, 3};
    host.fn = [&](const HostEditContext& c) {
      ++calls;
      EXPECT_EQ(c.hook, "blocks.0.hook_resid_post");
      ASSERT_EQ(c.value.shape, (Shape{1, 5, s->config().hidden_size}));
      ASSERT_EQ(c.selected.shape, (Shape{1, 5, 1}));
      EXPECT_EQ(c.step, 0);
      const auto H = c.value.shape[2];
      for (std::int64_t t = 0; t < 5; ++t) {
        EXPECT_EQ(c.positions.as<const std::int32_t>()[t], t);
        EXPECT_EQ(c.selected.as<const std::uint8_t>()[t], t == 1 || t == 3) << t;
        if (c.selected.as<const std::uint8_t>()[t])
          for (std::int64_t j = 0; j < H; ++j) c.value.as<float>()[t * H + j] = 0;
      }
    };
    const sonde::RunResult a = run(*s, {req}, forward_with(host));
    EXPECT_EQ(calls, 1);

    EditSpec zero = host;
    zero.op = "zero";
    zero.fn = nullptr;
    const sonde::RunResult b = run(*s, {req}, forward_with(zero));
    const sonde::RunResult plain = run(*s, {req}, forward_with_none());
    ASSERT_EQ(a.logits.shape(), b.logits.shape());
    const auto n = static_cast<std::size_t>(a.logits.shape().numel());
    EXPECT_TRUE(std::equal(a.logits.data<float>(), a.logits.data<float>() + n, b.logits.data<float>()));
    EXPECT_FALSE(std::equal(a.logits.data<float>(), a.logits.data<float>() + n, plain.logits.data<float>()));
    EXPECT_TRUE(s->edits().empty()) << "a run's edits end with it";
  }
}

// A diffusion generation calls the function once per denoising step, with the step's index.
TEST(HostEdit, SeesEveryDenoisingStep) {
  const auto dir = temp_dir();
  auto s = open_tiny("dream", dir, "reference");
  Request req;
  req.ids = {5, 17, 301};
  req.settings.max_new_tokens = 4;
  req.settings.steps = 4;
  std::vector<std::int64_t> steps;
  EditSpec host;
  host.hook = "blocks.1.hook_resid_mid";
  host.op = "host";
  host.fn = [&](const HostEditContext& c) { steps.push_back(c.step); };
  RunOptions o;
  o.edits = {host};
  run(*s, {req}, o);
  EXPECT_EQ(steps, (std::vector<std::int64_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace sonde::test
