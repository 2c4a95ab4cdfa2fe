// The process the streaming tests kill: a stand-in for `sonde batch` that streams
// stream_scenario.h's prompts into an HDF5 file and a results file, checkpointing every EVERY
// prompts, the results file made durable first (as the Sink interface asks).
//
// Usage: stream_child PATH RESULTS N EVERY fresh|resume f32|bf16|f16 DIFFUSION(0|1) QUEUE_BYTES
// Exit: 0 done; 10 a sonde::Error (message on stderr); 11 anything else.
#include "stream_scenario.h"

#include <sonde/error.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace sonde;
using namespace sonde::test;

namespace {

DType parse_dtype(const std::string& s) { return s == "bf16" ? DType::bf16 : s == "f16" ? DType::f16 : DType::f32; }

// The results file, appended and fsynced; on resume cut back to the committed bytes.
class Results {
 public:
  Results(const std::string& path, std::uint64_t keep) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(keep)) != 0 || ::lseek(fd_, 0, SEEK_END) < 0)
      throw Error(ErrorKind::Runtime, "cannot prepare " + path);
    bytes_ = keep;
  }
  ~Results() { ::close(fd_); }
  void append(const std::string& line) {
    if (::write(fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw Error(ErrorKind::Runtime, "cannot write the results file");
    bytes_ += line.size();
  }
  std::uint64_t sync() {
    ::fsync(fd_);
    return bytes_;
  }

 private:
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
};

int run(char** argv) {
  SinkOptions o;
  o.path = argv[1];
  const std::string results_path = argv[2];
  const std::int64_t n = std::atoll(argv[3]), every = std::atoll(argv[4]);
  o.streaming = true;
  o.resume = std::string(argv[5]) == "resume";
  o.storage = parse_dtype(argv[6]);
  o.diffusion = std::string(argv[7]) == "1";
  o.queue_bytes = static_cast<std::size_t>(std::atoll(argv[8]));
  const auto pace = std::chrono::microseconds(std::atoll(argv[9]));
  auto sink = make_hdf5_sink();
  const CommitMark start = sink->open(o, stream_meta(), stream_hooks());
  Results results(results_path, start.results_bytes);
  CommitMark mark = start;
  for (std::int64_t p = start.prompts; p < n; ++p) {
    std::this_thread::sleep_for(pace);  // stands in for the forward passes of a real run
    stream_one(*sink, p, o.diffusion);
    results.append(result_line(p));
    mark.prompts = p + 1;
    mark.rows += static_cast<std::int64_t>(stream_prompt(p).rows.size());
    if (mark.prompts % every == 0 || mark.prompts == n) {
      mark.results_bytes = results.sync();
      sink->checkpoint(mark);
    }
  }
  sink->close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: stream_child PATH RESULTS N EVERY fresh|resume DTYPE DIFFUSION QUEUE_BYTES PACE_US\n");
    return 11;
  }
  try {
    return run(argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 10;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "other: %s\n", e.what());
    return 11;
  }
}
