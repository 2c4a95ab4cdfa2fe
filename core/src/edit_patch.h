#pragma once
// PatchRows from a sonde activation file (sonde.acts/1): the rows of one hook, by prompt id,
// position and (diffusion) step.
#include <sonde/edits.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sonde {

class FilePatchRows final : public PatchRows {
 public:
  struct Row {
    std::int64_t pos, step, index;
  };
  struct Prompt {
    std::vector<std::int32_t> tokens;  // prompt + completion, as the source recorded them
    std::vector<Row> rows;
  };
  // BadInput (prefixed by `where`) for a file of another model (its config_json differs), or
  // without the hook's rows.
  static std::shared_ptr<FilePatchRows> open(const std::string& file, const std::string& hook, std::int64_t row_elems,
                                             const std::string& config_json, const std::string& where);
  std::int64_t row_elems() const override { return row_elems_; }
  const float* row(const std::string& prompt_id, std::int64_t pos, std::int64_t step) const override;
  const Prompt* prompt(const std::string& id) const;
  void match_steps(bool on) { match_steps_ = on; }  // diffusion: a row of the same step

 private:
  std::int64_t row_elems_ = 0;
  Tensor acts_;  // [N, row_elems] f32
  std::map<std::string, Prompt> prompts_;
  bool match_steps_ = false;
};

}  // namespace sonde
