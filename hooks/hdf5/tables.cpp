#include "tables.h"

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

template <typename T, typename F>
std::vector<T> pluck(const std::vector<RowRecord>& rows, F field) {
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
}

void RaggedColumn::append(const void* data, std::size_t n, hid_t mem_type) {
  values_.append(data, n, mem_type);
  const std::int64_t end = end_ + static_cast<std::int64_t>(n);
  offsets_.append(&end, 1, H5T_NATIVE_INT64);
  end_ = end;
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
  write_attr(group_, "kind_values", "0 prompt, 1 generated, 2 special, 3 masked, 4 committed at this step");
}

void RowsTable::append(const std::vector<RowRecord>& rows) {
  const hsize_t n = rows.size();
  prompt_idx_.append(pluck<std::int64_t>(rows, [](auto& r) { return r.prompt_idx; }).data(), n, H5T_NATIVE_INT64);
  pos_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.pos; }).data(), n, H5T_NATIVE_INT32);
  token_id_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.token_id; }).data(), n, H5T_NATIVE_INT32);
  step_.append(pluck<std::int32_t>(rows, [](auto& r) { return r.step; }).data(), n, H5T_NATIVE_INT32);
  kind_.append(pluck<std::uint8_t>(rows, [](auto& r) { return r.kind; }).data(), n, H5T_NATIVE_UINT8);
}

void RowsTable::close() {
  for (auto* c : {&prompt_idx_, &pos_, &token_id_, &step_, &kind_}) c->close();
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

void PromptsTable::close() {
  for (auto* c : {&prompt_idx_, &row_start_, &row_count_, &seed_}) c->close();
  for (auto* c : {&id_, &text_, &completion_, &finish_reason_, &token_ids_}) c->close();
  group_.close();
}

}  // namespace sonde::h5
