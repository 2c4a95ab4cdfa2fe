// sonde::host's CPU features against the kernel's own account of the CPU (/proc/cpuinfo's
// flags), so a wrong feature name or a wrong rule in widest_isa() shows here, not as a SIGILL
// in the threaded backend on some other host.
#include <sonde/host/cpu.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace {

std::set<std::string> proc_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(line.find(':') + 1));
      std::set<std::string> out;
      for (std::string w; words >> w;) out.insert(w);
      return out;
    }
  return {};
}

TEST(HostCpu, FeaturesMatchProcCpuinfo) {
  const auto flags = proc_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo on this host";
  const auto& f = sonde::host::cpu_features();
  EXPECT_EQ(f.avx2, flags.count("avx2") == 1);
  EXPECT_EQ(f.fma, flags.count("fma") == 1);
  EXPECT_EQ(f.f16c, flags.count("f16c") == 1);
  EXPECT_EQ(f.avx512f, flags.count("avx512f") == 1);
  EXPECT_EQ(f.avx512bw, flags.count("avx512bw") == 1);
  EXPECT_EQ(f.avx512vl, flags.count("avx512vl") == 1);
  EXPECT_EQ(f.avx512vnni, flags.count("avx512_vnni") == 1);
}

TEST(HostCpu, WidestIsaNeedsEveryFeatureItsKernelsAreBuiltWith) {
  const auto flags = proc_flags();
  if (flags.empty()) GTEST_SKIP() << "no flags line in /proc/cpuinfo on this host";
  auto has = [&](const char* f) { return flags.count(f) == 1; };
  const bool avx512 = has("avx512f") && has("avx512bw") && has("avx512vl") && has("fma");
  const bool avx2 = has("avx2") && has("fma") && has("f16c");
  EXPECT_EQ(sonde::host::widest_isa(), avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
}

}  // namespace
