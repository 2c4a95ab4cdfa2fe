#pragma once
// Where captured activations go. The executor asks wants() at plan time only; write() receives
// the rows of one hook for one prompt. Sinks are plugins of kind "sink" (hooks/).
#include <sonde/model.h>
#include <sonde/plugin.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sonde {

// Row kinds of /rows/kind (design §5).
enum class RowKind : std::uint8_t { Prompt = 0, Generated = 1, Special = 2, Masked = 3, Committed = 4 };

struct RowRecord {
  std::int64_t prompt_idx = 0;
  std::int32_t pos = 0;
  std::int32_t token_id = 0;
  std::int32_t step = -1;
  RowKind kind = RowKind::Prompt;
};

struct PromptRecord {
  std::int64_t prompt_idx = 0;
  std::string id, text, completion, finish_reason;
  std::vector<std::int32_t> token_ids;
  std::uint64_t seed = 0;
};

struct SinkOptions {
  std::string path;
  DType storage = DType::f32;  // f32, bf16 or f16
  bool overwrite = false;
  bool compress = false;       // shuffle + deflate
};

// Root attributes (design §5): strings and integers.
struct RunMetadata {
  std::map<std::string, std::string> strings;
  std::map<std::string, std::int64_t> ints;
};

// One delivery: `rows` rows of hook `hook`, tensor [rows, *row_shape].
struct TapRecord {
  std::string hook;
  std::int64_t prompt_idx = 0;
};

class Sink : public Plugin {
 public:
  // Creates the file and every dataset of the selected hooks up front.
  virtual void open(const SinkOptions& options, const RunMetadata& meta,
                    const std::vector<HookPoint>& hooks) = 0;
  virtual bool wants(const std::string& hook) const = 0;
  virtual void write(const TapRecord& rec, const TensorView& rows) = 0;
  virtual void add_rows(const std::vector<RowRecord>& rows) = 0;
  virtual void end_prompt(const PromptRecord& prompt) = 0;
  // A whole top-level dataset (forward's /input_ids and /logits).
  virtual void write_array(const std::string& path, const TensorView& data) = 0;
  virtual void flush() = 0;
  virtual void close() = 0;  // after close() the file is complete
};

}  // namespace sonde
