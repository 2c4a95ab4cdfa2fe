#include "tables.h"

#include <sonde/error.h>

namespace sonde::h5 {
namespace {

// Table chunks are small (64 KiB) so that a file of a few prompts stays small.
constexpr std::size_t kTableChunkBytes = std::size_t{1} << 16;

Extendible column(const Handle& group, const std::string& name, hid_t file_type) {
  ExtendibleSpec spec;
  spec.file_type = file_type;
  spec.chunk_rows = chunk_rows_for(H5Tget_size(file_type), kTableChunkBytes);
  return Extendible::create(group, name, spec);
}

template <typename T, typename R, typename F>
std::vector<T> pluck(const std::vector<R>& rows, F field) {
  std::vector<T> out;
  out.reserve(rows.size());
  for (const auto& r : rows) out.push_back(static_cast<T>(field(r)));
  return out;
}

}  // namespace

const char* const kPromptsLayout =
    "Entry p of each table is prompt p. Variable-length fields are a flat values dataset plus an i64 "
    "offsets dataset of N+1 entries starting at 0 (never HDF5 variable-length strings). Prompt p's text "
    "is text_bytes[text_offsets[p]:text_offsets[p+1]] decoded as UTF-8; likewise id, completion and "
    "finish_reason (id_bytes/id_offsets, ...). Its tokens are token_ids[token_offsets[p]:token_offsets[p+1]]. "
    "Its captured rows are /rows/*[row_start[p]:row_start[p]+row_count[p]], and the same rows of every "
    "/acts/<hook>.";

void RaggedColumn::create(const Handle& group, const std::string& values, const std::string& offsets,
                          hid_t file_type) {
  values_ = column(group, values, file_type);
  offsets_ = column(group, offsets, H5T_STD_I64LE);
  end_ = 0;
  offsets_.append(&end_, 1, H5T_NATIVE_INT64);
  offsets_.write_pending();  // the leading 0 is part of the empty table's layout: on disk at once
}

void RaggedColumn::open(const Handle& group, const std::string& values, const std::string& offsets) {
  values_ = Extendible::open(group, values);
  offsets_ = Extendible::open(group, offsets);
  if (offsets_.rows() == 0) fail("use as an offsets column (it lacks the leading 0)", offsets_.handle().where());
  offsets_.read_at(offsets_.rows() - 1, &end_, H5T_NATIVE_INT64);
}

void RaggedColumn::append(const void* data, std::size_t n, hid_t mem_type) {
  values_.append(data, n, mem_type);
  const std::int64_t end = end_ + static_cast<std::int64_t>(n);
  offsets_.append(&end, 1, H5T_NATIVE_INT64);
  end_ = end;
}

void RaggedColumn::truncate(std::int64_t entries) {
  offsets_.truncate(static_cast<hsize_t>(entries) + 1);
  offsets_.read_at(static_cast<hsize_t>(entries), &end_, H5T_NATIVE_INT64);
  values_.truncate(static_cast<hsize_t>(end_));
}

void RaggedColumn::flush() {
  values_.flush();
  offsets_.flush();
}

void RaggedColumn::close() {
  values_.close();
  offsets_.close();
}

void RowsTable::create(const Handle& file) {
  group_ = create_group(file, "rows");
  prompt_idx_ = column(group_, "prompt_idx", H5T_STD_I64LE);
  pos_ = column(group_, "pos", H5T_STD_I32LE);
  token_id_ = column(group_, "token_id", H5T_STD_I32LE);
  step_ = column(group_, "step", H5T_STD_I32LE);
  kind_ = column(group_, "kind", H5T_STD_U8LE);
  fresh_ = column(group_, "fresh", H5T_STD_U8LE);
  computed_step_ = column(group_, "computed_step", H5T_STD_I32LE);
  write_attr(group_, "kind_values", "0 prompt, 1 generated, 2 special, 3 masked, 4 committed at this step");
  write_attr(group_, "fresh_values",
             "1 computed by this step's forward; 0 served from a diffusion K/V cache: the values computed at "
             "computed_step");
}

void RowsTable::open(const Handle& file) {
  group_ = open_group(file, "rows");
  prompt_idx_ = Extendible::open(group_, "prompt_idx");
  pos_ = Extendible::open(group_, "pos");
  token_id_ = Extendible::open(group_, "token_id");
  step_ = Extendible::open(group_, "step");
  kind_ = Extendible::open(group_, "kind");
  // Files from before the cached diffusion modes marked reused rows have no such column.
  if (H5Lexists(group_.id(), "fresh", H5P_DEFAULT) <= 0)
    bad_input("{} has no 'fresh' column: it was written by an older sonde; finish it with that version or start "
              "the run again",
              group_.where());
  fresh_ = Extendible::open(group_, "fresh");
  computed_step_ = Extendible::open(group_, "computed_step");
}

void RowsTable::append(const std::vector<RowRecord>& rows) {
  const hsize_t n = rows.size();
  prompt_idx_.append(pluck<std::int64_t>(rows, [](auto& r) { return r.prompt_idx; }).data(), n, H5T_NATIVE_INT64);
  pos_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.pos; }).data(), n, H5T_NATIVE_INT32);
  token_id_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.token_id; }).data(), n, H5T_NATIVE_INT32);
  step_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.step; }).data(), n, H5T_NATIVE_INT32);
  kind_.append(pluck<std::uint8_t>(rows, [](auto& r) { return r.kind; }).data(), n, H5T_NATIVE_UINT8);
  fresh_.append(pluck<std::uint8_t>(rows, [](auto& r) { return r.fresh; }).data(), n, H5T_NATIVE_UINT8);
  computed_step_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.computed_step; }).data(), n, H5T_NATIVE_INT32);
}

void RowsTable::truncate(std::int64_t n) {
  for (auto* c : columns()) c->truncate(static_cast<hsize_t>(n));
}

void RowsTable::flush() {
  for (auto* c : columns()) c->flush();
}

void RowsTable::close() {
  for (auto* c : columns()) c->close();
  group_.close();
}

void PromptsTable::create(const Handle& file) {
  group_ = create_group(file, "prompts");
  prompt_idx_ = column(group_, "prompt_idx", H5T_STD_I64LE);
  row_start_ = column(group_, "row_start", H5T_STD_I64LE);
  row_count_ = column(group_, "row_count", H5T_STD_I64LE);
  seed_ = column(group_, "seed", H5T_STD_U64LE);
  id_.create(group_, "id_bytes", "id_offsets", H5T_STD_U8LE);
  text_.create(group_, "text_bytes", "text_offsets", H5T_STD_U8LE);
  completion_.create(group_, "completion_bytes", "completion_offsets", H5T_STD_U8LE);
  finish_reason_.create(group_, "finish_reason_bytes", "finish_reason_offsets", H5T_STD_U8LE);
  token_ids_.create(group_, "token_ids", "token_offsets", H5T_STD_I32LE);
  write_attr(group_, "layout", kPromptsLayout);
}

void PromptsTable::open(const Handle& file) {
  group_ = open_group(file, "prompts");
  prompt_idx_ = Extendible::open(group_, "prompt_idx");
  row_start_ = Extendible::open(group_, "row_start");
  row_count_ = Extendible::open(group_, "row_count");
  seed_ = Extendible::open(group_, "seed");
  id_.open(group_, "id_bytes", "id_offsets");
  text_.open(group_, "text_bytes", "text_offsets");
  completion_.open(group_, "completion_bytes", "completion_offsets");
  finish_reason_.open(group_, "finish_reason_bytes", "finish_reason_offsets");
  token_ids_.open(group_, "token_ids", "token_offsets");
}

void PromptsTable::append(const PromptRecord& p, std::int64_t row_start, std::int64_t row_count) {
  prompt_idx_.append(&p.prompt_idx, 1, H5T_NATIVE_INT64);
  row_start_.append(&row_start, 1, H5T_NATIVE_INT64);
  row_count_.append(&row_count, 1, H5T_NATIVE_INT64);
  seed_.append(&p.seed, 1, H5T_NATIVE_UINT64);
  id_.append(p.id);
  text_.append(p.text);
  completion_.append(p.completion);
  finish_reason_.append(p.finish_reason);
  token_ids_.append(p.token_ids.data(), p.token_ids.size(), H5T_NATIVE_INT32);
}

void PromptsTable::truncate(std::int64_t n) {
  for (auto* c : columns()) c->truncate(static_cast<hsize_t>(n));
  for (auto* c : ragged()) c->truncate(n);
}

void PromptsTable::flush() {
  for (auto* c : columns()) c->flush();
  for (auto* c : ragged()) c->flush();
}

void PromptsTable::close() {
  for (auto* c : columns()) c->close();
  for (auto* c : ragged()) c->close();
  group_.close();
}

void StepsTable::create(const Handle& file) {
  group_ = create_group(file, "steps");
  prompt_idx_ = column(group_, "prompt_idx", H5T_STD_I64LE);
  step_ = column(group_, "step", H5T_STD_I32LE);
  t_ = column(group_, "t", H5T_IEEE_F32LE);
  n_transfer_ = column(group_, "n_transfer", H5T_STD_I32LE);
  block_ = column(group_, "block", H5T_STD_I32LE);
  n_recomputed_ = column(group_, "n_recomputed", H5T_STD_I32LE);
  canvas_.create(group_, "canvas", "canvas_offsets", H5T_STD_I32LE);
}

void StepsTable::open(const Handle& file) {
  group_ = open_group(file, "steps");
  prompt_idx_ = Extendible::open(group_, "prompt_idx");
  step_ = Extendible::open(group_, "step");
  t_ = Extendible::open(group_, "t");
  n_transfer_ = Extendible::open(group_, "n_transfer");
  block_ = Extendible::open(group_, "block");
  n_recomputed_ = Extendible::open(group_, "n_recomputed");
  canvas_.open(group_, "canvas", "canvas_offsets");
}

void StepsTable::append(const std::vector<StepRecord>& steps) {
  const hsize_t n = steps.size();
  prompt_idx_.append(pluck<std::int64_t>(steps, [](auto& s) { return s.prompt_idx; }).data(), n, H5T_NATIVE_INT64);
  step_.append(pluck<std::int32_t>(steps, [](auto& s) { return s.step; }).data(), n, H5T_NATIVE_INT32);
  t_.append(pluck<float>(steps, [](auto& s) { return s.t; }).data(), n, H5T_NATIVE_FLOAT);
  n_transfer_.append(pluck<std::int32_t>(steps, [](auto& s) { return s.n_transfer; }).data(), n, H5T_NATIVE_INT32);
  block_.append(pluck<std::int32_t>(steps, [](auto& s) { return s.block; }).data(), n, H5T_NATIVE_INT32);
  n_recomputed_.append(pluck<std::int32_t>(steps, [](auto& s) { return s.n_recomputed; }).data(), n, H5T_NATIVE_INT32);
  for (const auto& s : steps) canvas_.append(s.canvas.data(), s.canvas.size(), H5T_NATIVE_INT32);
}

std::int64_t StepsTable::count_before(std::int64_t prompt, std::int64_t n) const {
  std::int64_t lo = 0, hi = n;  // binary search: rows [0, lo) are before `prompt`, [hi, n) are not
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    std::int64_t idx = 0;
    prompt_idx_.read_at(static_cast<hsize_t>(mid), &idx, H5T_NATIVE_INT64);
    if (idx < prompt)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void StepsTable::truncate(std::int64_t n) {
  for (auto* c : columns()) c->truncate(static_cast<hsize_t>(n));
  canvas_.truncate(n);
}

void StepsTable::flush() {
  for (auto* c : columns()) c->flush();
  canvas_.flush();
}

void StepsTable::close() {
  for (auto* c : columns()) c->close();
  canvas_.close();
  group_.close();
}

namespace {

// One compound record, written by one H5Dwrite into a 32-byte contiguous dataset: a crash cannot
// leave the counts torn between two checkpoints, as separate datasets could.
Handle mark_type(hid_t int64, hid_t uint64) {
  Handle t(check_id(H5Tcreate(H5T_COMPOUND, sizeof(ProgressValues)), "create", "the /progress record type"), H5Tclose,
           "", "");
  check_rc(H5Tinsert(t.id(), "prompts", HOFFSET(ProgressValues, prompts), int64), "build", "the /progress type");
  check_rc(H5Tinsert(t.id(), "rows", HOFFSET(ProgressValues, rows), int64), "build", "the /progress type");
  check_rc(H5Tinsert(t.id(), "steps", HOFFSET(ProgressValues, steps), int64), "build", "the /progress type");
  check_rc(H5Tinsert(t.id(), "results_bytes", HOFFSET(ProgressValues, results_bytes), uint64), "build",
           "the /progress type");
  return t;
}

}  // namespace

void ProgressTable::create(const Handle& file) {
  group_ = create_group(file, "progress");
  Handle type = mark_type(H5T_STD_I64LE, H5T_STD_U64LE);
  mark_ = create_dataset(group_, "mark", type.id(), create_space({1}, {1}), Handle());
  write_attr(group_, "meaning",
             "mark[0] is the last checkpoint: the first `prompts` entries of /prompts, `rows` of /rows and every "
             "/acts dataset, and `steps` of /steps are complete; `results_bytes` bytes of results.jsonl belong to "
             "them. Anything beyond is uncommitted and dropped by a resume.");
  write(ProgressValues{});
}

void ProgressTable::open(const Handle& file) {
  group_ = open_group(file, "progress");
  mark_ = open_dataset(group_, "mark");
}

ProgressValues ProgressTable::read() const {
  ProgressValues v;
  Handle type = mark_type(H5T_NATIVE_INT64, H5T_NATIVE_UINT64);
  check_rc(H5Dread(mark_.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "read", mark_.where());
  return v;
}

void ProgressTable::write(const ProgressValues& v) {
  Handle type = mark_type(H5T_NATIVE_INT64, H5T_NATIVE_UINT64);
  check_rc(H5Dwrite(mark_.id(), type.id(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &v), "write", mark_.where());
  check_rc(H5Dflush(mark_.id()), "flush", mark_.where());
}

void ProgressTable::close() {
  mark_.close();
  group_.close();
}

}  // namespace sonde::h5
