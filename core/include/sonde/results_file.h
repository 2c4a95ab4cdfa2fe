#pragma once
// The results JSONL of a committed run (sonde batch), committed in step with its sinks: lines are
// buffered and written at each checkpoint; the byte length after the write is the mark the sinks
// record (HDF5 /progress), so on resume the file is cut back to exactly what the sinks hold.
#include <cstdint>
#include <filesystem>
#include <string>

namespace sonde {

class ResultsFile {
 public:
  // Creates (or truncates) `path`, or with resume keeps its first `keep_bytes` bytes.
  ResultsFile(const std::filesystem::path& path, bool resume, std::uint64_t keep_bytes, bool durable);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  void append(const std::string& line) { pending_ += line + "\n"; }
  // Writes the buffered lines (fsync with durable) and returns the file's committed length.
  std::uint64_t commit();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::string pending_;
  std::uint64_t size_ = 0;
  bool durable_ = false;
};

// Without an activation file the results file is its own mark: the complete lines it holds
// (a torn last line is dropped). Returns {lines, bytes}.
struct ResultsMark {
  std::int64_t lines = 0;
  std::uint64_t bytes = 0;
};
ResultsMark complete_lines(const std::filesystem::path& path);

}  // namespace sonde
