// A patch source: one hook's rows of an earlier sonde file, by prompt id and position
// (edit_spec.h, op patch). The file is read whole: patching pairs are small runs.
#include "edit_patch.h"

#include <sonde/array_reader.h>
#include <sonde/error.h>
#include <sonde/model_dir.h>

#include <algorithm>

namespace sonde {

namespace {

std::vector<std::int64_t> ints(const Tensor& t) {
  if (t.dtype() != DType::i64) runtime_error("patch source: expected integers");
  return {t.data<std::int64_t>(), t.data<std::int64_t>() + t.shape().numel()};
}

}  // namespace

std::shared_ptr<FilePatchRows> FilePatchRows::open(const std::string& file, const std::string& hook, std::int64_t row_elems,
                                                   const std::string& config_json, const std::string& where) {
  auto reader = array_reader_for(file);
  const auto src_config = reader->root_attr(file, "config_json");
  if (!src_config) bad_input("{}: {} is not a sonde activation file (no config_json attribute)", where, file);
  const auto a = sha256_hex(src_config->data(), src_config->size()), b = sha256_hex(config_json.data(), config_json.size());
  if (a != b) bad_input("{}: {} was written by another model (config sha256 {} vs this model's {})", where, file, a.substr(0, 12), b.substr(0, 12));
  const std::string acts = "/acts/" + hook;
  if (!reader->has(file, acts)) bad_input("{}: {} has no dataset '{}' (capture the hook in the source run)", where, file, acts);

  auto p = std::make_shared<FilePatchRows>();
  p->row_elems_ = row_elems;
  p->acts_ = reader->read(file, acts);
  if (p->acts_.shape().numel() != p->acts_.shape()[0] * row_elems)
    bad_input("{}: {} '{}' has shape {}, not rows of {} values", where, file, acts, p->acts_.shape().str(), row_elems);
  const auto pos = ints(reader->read(file, "/rows/pos")), step = ints(reader->read(file, "/rows/step"));
  const auto start = ints(reader->read(file, "/prompts/row_start")), count = ints(reader->read(file, "/prompts/row_count"));
  const auto id_off = ints(reader->read(file, "/prompts/id_offsets"));
  const auto tok_off = ints(reader->read(file, "/prompts/token_offsets"));
  const Tensor id_bytes = reader->read(file, "/prompts/id_bytes");
  const auto tokens = ints(reader->read(file, "/prompts/token_ids"));
  for (std::size_t i = 0; i < start.size(); ++i) {
    Prompt pr;
    const auto* bytes = id_bytes.data<std::uint8_t>();
    const std::string id(reinterpret_cast<const char*>(bytes) + id_off[i], reinterpret_cast<const char*>(bytes) + id_off[i + 1]);
    pr.tokens.assign(tokens.begin() + tok_off[i], tokens.begin() + tok_off[i + 1]);
    for (std::int64_t r = start[i]; r < start[i] + count[i]; ++r)
      pr.rows.push_back({pos[static_cast<std::size_t>(r)], step[static_cast<std::size_t>(r)], r});
    p->prompts_[id] = std::move(pr);
  }
  return p;
}

const FilePatchRows::Prompt* FilePatchRows::prompt(const std::string& id) const {
  auto it = prompts_.find(id);
  return it == prompts_.end() ? nullptr : &it->second;
}

const float* FilePatchRows::row(const std::string& prompt_id, std::int64_t pos, std::int64_t step) const {
  const Prompt* p = prompt(prompt_id);
  if (!p) return nullptr;
  const Row* hit = nullptr;
  for (const auto& r : p->rows)
    if (r.pos == pos && (!match_steps_ || r.step == step)) {
      hit = &r;
      break;
    }
  return hit ? acts_.data<float>() + hit->index * row_elems_ : nullptr;
}

}  // namespace sonde
