// Requests made ready to run: tokenized with the session's tokenizer, settings merged over the
// run's defaults, checked against the model; then grouped into micro-batches (run_internal.h).
#include <sonde/chat.h>
#include <sonde/config.h>
#include <sonde/error.h>
#include <sonde/tokenizer.h>

#include "run_internal.h"

namespace sonde::run_detail {
namespace {

// The prompt's tokens; `text` receives the text they encode (the rendered chat for messages).
std::vector<std::int32_t> tokenize(const RunModel& s, const Request& r, std::string& text) {
  if (!r.ids.empty()) return r.ids;
  const Tokenizer* tok = s.tokenizer();
  if (!tok)
    bad_input("{}: {} has no tokenizer (tokenizer.json, or vocab.json and merges.txt); give token ids instead", r.where,
              s.model_dir().string());
  text = r.messages.empty() ? r.text : apply_chat_template(r.messages, tok->chat_template(), true);
  auto ids = tok->encode(text);
  if (ids.empty()) bad_input("{}: the prompt is empty (it encodes to no tokens)", r.where);
  return ids;
}

// Diffusion settings that only the model can judge: the resolved block and step counts, and a
// diffusion mode other than exact asked of an autoregressive model.
void check_decoding_settings(const RunModel& s, const Request& r, const GenerationSettings& g) {
  try {
    if (s.info().decoding == DecodingKind::MaskedDiffusion) {
      check_diffusion_options(resolve_diffusion(g, s.config(), s.info()));
    } else if (g.diffusion_mode && *g.diffusion_mode != "exact") {
      bad_input("diffusion_mode: {} needs a diffusion model; {} decodes autoregressively", *g.diffusion_mode,
                s.model_dir().string());
    }
  } catch (const Error& e) {
    bad_input("{}: {}", r.where, e.what());
  }
}

// A scored request's completion: its ids, or its text encoded as it is.
std::vector<std::int32_t> completion(const RunModel& s, const Request& r) {
  std::vector<std::int32_t> ids = r.completion_ids;
  if (ids.empty() && r.completion) {
    if (!s.tokenizer()) bad_input("{}: {} has no tokenizer; give ids and completion_ids", r.where, s.model_dir().string());
    ids = s.tokenizer()->encode(*r.completion);
  }
  if (ids.empty()) bad_input("{}: no completion to score (give completion or completion_ids)", r.where);
  const auto V = s.config().vocab_size;
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= V)
      bad_input("{}: completion token id {} at position {} is outside the vocabulary [0, {})", r.where, ids[i], i, V);
  return ids;
}

}  // namespace

PreparedRequest prepare_one(const RunModel& s, const Request& r, std::int64_t index, const RunOptions& o) {
  const auto& cfg = s.config();
  PreparedRequest p;
  p.index = index;
  p.request = &r;
  p.id = r.id.empty() ? std::to_string(index) : r.id;
  p.ids = tokenize(s, r, p.text);
  for (std::size_t i = 0; i < p.ids.size(); ++i)
    if (p.ids[i] < 0 || p.ids[i] >= cfg.vocab_size)
      bad_input("{}: token id {} at position {} is outside the vocabulary [0, {})", r.where, p.ids[i], i, cfg.vocab_size);
  p.settings = o.defaults.overridden_by(r.settings);
  p.seed = p.settings.seed.value_or(o.seed + static_cast<std::uint64_t>(index));
  if (o.kind == RunKind::Score) p.completion = completion(s, r);
  const auto T = static_cast<std::int64_t>(p.ids.size() + p.completion.size());
  if (o.kind == RunKind::Forward || o.kind == RunKind::Score || (o.kind == RunKind::Lens && !o.lens.diffusion)) {
    if (T > cfg.max_position_embeddings)
      bad_input("{}: {} tokens exceed max_position_embeddings {}", r.where, T, cfg.max_position_embeddings);
    return p;
  }
  try {
    p.settings.check();
  } catch (const Error& e) {
    bad_input("{}: {}", r.where, e.what());
  }
  const auto n = resolve_max_new_tokens(p.settings, cfg);
  if (n < 1) bad_input("{}: max_new_tokens must be at least 1, got {}", r.where, n);
  check_decoding_settings(s, r, p.settings);
  if (T + n > cfg.max_position_embeddings)
    bad_input("{}: {} prompt tokens + {} new tokens = {} exceed max_position_embeddings {}", r.where, T, n, T + n,
              cfg.max_position_embeddings);
  p.key = p.settings.batch_key();
  return p;
}

std::vector<PreparedRequest> prepare(const RunModel& s, const std::vector<Request>& requests, const RunOptions& o,
                                     std::vector<std::string>& skipped) {
  std::vector<PreparedRequest> out;
  for (const auto& r : requests) {
    try {
      out.push_back(prepare_one(s, r, static_cast<std::int64_t>(out.size()), o));
    } catch (const Error& e) {
      if (!o.skip_bad || e.kind() != ErrorKind::BadInput) throw;
      skipped.push_back(e.what());
    }
  }
  if (out.empty()) bad_input("the run holds no usable requests");
  return out;
}

std::vector<const PreparedRequest*> next_batch(const std::vector<PreparedRequest>& all, std::size_t from,
                                               std::int64_t size) {
  std::vector<const PreparedRequest*> b;
  for (std::size_t i = from; i < all.size() && (size <= 0 || static_cast<std::int64_t>(b.size()) < size); ++i) {
    if (!b.empty() && all[i].key != b.front()->key) break;
    b.push_back(&all[i]);
  }
  return b;
}

}  // namespace sonde::run_detail
