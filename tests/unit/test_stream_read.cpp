// The streaming read behind `sonde bench`'s decode bound (core/host, sonde::host): every
// byte of every range is read once, whatever the ranges' sizes and alignments and the thread
// count. The checksum is computed here independently: the sum of each range's little-endian
// 64-bit words, the last one zero-padded.
#include <sonde/host/stream_read.h>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace {

using sonde::host::ByteRange;

std::uint64_t words_sum(const unsigned char* p, std::size_t n) {
  std::uint64_t s = 0;
  for (std::size_t i = 0; i < n; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p + i, std::min<std::size_t>(8, n - i));
    s += w;
  }
  return s;
}

TEST(StreamRead, EveryByteOfOddRangesOnAnyThreadCount) {
  std::vector<unsigned char> buf(300000);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 131 + (i >> 9));
  // Sizes below, at and above a 256-byte block and a multi-block one; starts off any alignment.
  const std::vector<std::pair<std::size_t, std::size_t>> spans{{3, 5}, {17, 256}, {400, 1000}, {2001, 250007}, {260000, 1}};
  std::vector<ByteRange> ranges;
  std::uint64_t expected = 0;
  for (const auto& [off, n] : spans) {
    ranges.push_back({buf.data() + off, n});
    expected += words_sum(buf.data() + off, n);
  }
  for (int threads : {1, 2, 3, 7})
    for (int streams : {1, 2, 4, 8}) {
      std::uint64_t got = 0;
      const double seconds = sonde::host::stream_read(ranges, threads, &got, streams);
      EXPECT_EQ(got, expected) << threads << " threads, " << streams << " streams";
      EXPECT_GE(seconds, 0.0);
    }
}

// Many ranges, so a thread's runs cross from range to range at different times, and ranges
// shorter than a run's 256-byte step.
TEST(StreamRead, RunsCrossManyRangesOfEverySize) {
  std::vector<unsigned char> buf(1 << 20);
  for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<unsigned char>(i * 7 + (i >> 11));
  std::vector<ByteRange> ranges;
  std::uint64_t expected = 0;
  std::size_t off = 0;
  for (std::size_t k = 0; off + 20000 < buf.size(); ++k) {
    const std::size_t n = (k * 2654435761u) % 20000 + 1;
    ranges.push_back({buf.data() + off, n});
    expected += words_sum(buf.data() + off, n);
    off += n + k % 5;
  }
  for (int threads : {1, 2, 5})
    for (int streams : {1, 3, 4, 8}) {
      std::uint64_t got = 0;
      sonde::host::stream_read(ranges, threads, &got, streams);
      EXPECT_EQ(got, expected) << threads << " threads, " << streams << " streams";
    }
}

TEST(StreamRead, ChangingOneByteChangesTheChecksum) {
  std::vector<unsigned char> buf(4096, 1);
  const ByteRange r{buf.data(), buf.size()};
  std::uint64_t a = 0, b = 0;
  sonde::host::stream_read({&r, 1}, 2, &a);
  buf[4095] = 2;  // the last byte, in the last word of the second thread's share
  sonde::host::stream_read({&r, 1}, 2, &b);
  EXPECT_NE(a, b);
}

TEST(StreamRead, NoRangesReadsNothing) {
  std::uint64_t sum = 123;
  sonde::host::stream_read({}, 2, &sum);
  EXPECT_EQ(sum, 0u);
}

}  // namespace
