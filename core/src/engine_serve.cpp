// Serving one step's posts (engine.h): autoregressive decode steps as one forward over the shared
// KV cache, prompts in chunks within the step's token budget, full forwards left-padded into one,
// slot-cache forwards one by one. Every forward gets an EditCall that names each row's request
// and step, and its taps are cut back into each request's own rows.
#include <sonde/engine.h>
#include <sonde/error.h>
#include <sonde/log.h>

#include "engine_internal.h"
#include "engine_kv.h"

#include <algorithm>
#include <cstring>

namespace sonde {
namespace {

// Rows [row, row + count) and slots [from, from + n) of a [B, T, ...] view.
TensorView rows_view(const TensorView& v, std::int64_t row, std::int64_t count, std::int64_t from, std::int64_t n) {
  TensorView out = v;
  out.shape[0] = count;
  out.shape[1] = n;
  out.data = static_cast<std::byte*>(v.data) +
             static_cast<std::size_t>(row * v.strides[0] + from * v.strides[1]) * dtype_size(v.dtype);
  return out;
}

// Chunks [1, n_i, ...] of one hook joined along the slots into [1, sum n_i, ...].
Tensor join_slots(const std::vector<Tensor>& parts) {
  Shape s = parts.at(0).shape();
  s[1] = 0;
  for (const auto& p : parts) s[1] += p.shape()[1];
  Tensor out(parts[0].dtype(), s);
  auto* dst = reinterpret_cast<std::byte*>(out.view().data);
  for (const auto& p : parts) {
    std::memcpy(dst, p.view().data, p.view().nbytes());
    dst += p.view().nbytes();
  }
  return out;
}

// A run of consecutive batch rows that belong to one request.
struct Block {
  EngineSeq* seq;
  std::int64_t row, count, pad, tokens;
};

std::vector<Block> blocks_of(const std::vector<EngineSeq*>& rows, const std::vector<std::int64_t>& pad,
                             const std::vector<std::int64_t>& tokens) {
  std::vector<Block> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!out.empty() && out.back().seq == rows[i]) {
      ++out.back().count;
      continue;
    }
    out.push_back({rows[i], static_cast<std::int64_t>(i), 1, pad[i], tokens[i]});
  }
  return out;
}

}  // namespace

Tensor Engine::run_forward(const StepInput& in, KvCache* cache, KvCache* scratch, const std::vector<EngineSeq*>& rows,
                           const std::vector<std::int64_t>& pad, const std::vector<std::int64_t>& tokens, bool join_taps) {
  EditCall call;
  for (const EngineSeq* s : rows) {
    call.prompt_len.push_back(s->prompt_len);
    call.prompt_id.push_back(s->req.id);
    call.row_step.push_back(s->forwards);
    call.row_owner.push_back(s->id);
  }
  const auto blocks = blocks_of(rows, pad, tokens);
  std::set<std::string> taps;
  for (const auto& b : blocks) taps.insert(b.seq->taps.begin(), b.seq->taps.end());
  HookTap tap;
  if (!taps.empty())
    tap = [&](const std::string& hook, const TensorView& v) {
      for (const auto& b : blocks) {
        EngineSeq& s = *b.seq;
        if (!s.taps.count(hook) || (!s.post.need_logits && model_.only_with_logits(hook))) continue;
        const TensorView mine = rows_view(v, b.row, b.count, b.pad, b.tokens);
        if (!join_taps) {
          s.tap(hook, mine);
          continue;
        }
        auto& parts = s.chunk_taps[hook];
        parts.push_back(Tensor::copy_of(mine));
      }
    };
  const double t = now();
  Tensor out = model_.forward(EngineBatch{in, cache, scratch, call, taps, tap});
  const double took = now() - t;
  std::lock_guard lk(mu_);
  ++counts_.forwards;
  if (kv_ && cache == &kv_->cache()) {
    counts_.decode_s += took;
    ++counts_.decode_forwards;
    counts_.decode_rows += in.batch;
  } else if (in.use_cache && !in.fill_cache && in.slots == 0) {
    counts_.prefill_s += took;
    ++counts_.prefill_forwards;
    for (const auto n : tokens) counts_.prefill_tokens += n;
  } else {
    counts_.other_forward_s += took;
  }
  return out;
}

namespace {

// Rows [row, row + count), slots [from, from + n) of logits [B, T, V] as a tensor of its own.
Tensor logits_rows(const Tensor& logits, std::int64_t row, std::int64_t count, std::int64_t from, std::int64_t n) {
  if (logits.empty()) return Tensor();
  return Tensor::copy_of(rows_view(logits.view(), row, count, from, n));
}

}  // namespace

void Engine::serve(std::vector<EngineSeq*>& parked) {
  std::sort(parked.begin(), parked.end(), [](const EngineSeq* a, const EngineSeq* b) { return a->id < b->id; });
  std::vector<EngineSeq*> decode, prefill, full, done;
  for (EngineSeq* s : parked) {
    const StepInput& p = s->post;
    if (p.fill_cache || p.slots > 0) {
      serve_alone(*s);
      done.push_back(s);
    } else if (p.use_cache) {
      (s->row >= 0 ? decode : prefill).push_back(s);
    } else {
      full.push_back(s);
    }
  }
  // A failed forward fails the requests it served (each ends with the error); the others go on.
  const auto guarded = [&](std::vector<EngineSeq*>& group, auto&& fn) {
    if (group.empty()) return;
    try {
      fn(group);
    } catch (...) {
      for (EngineSeq* s : group) s->fail = std::current_exception();
    }
  };
  // Prompts first, and their loops released as each forward of prompts ends: a new request samples
  // its first token while the next forward runs (another prompt's chunk, the running rows' decode),
  // so its time to first token is its prefill, not its prefill plus the rest of the step. Its row joins the shared cache after that forward, which must not
  // see it (the loop posts its next forward for the next step, so the row is there by then).
  std::vector<PendingRow> rows;
  std::vector<EngineSeq*> prompted;  // released by serve_prefill as each forward ends
  order_prompts(prefill);
  const bool tracing = spdlog::should_log(spdlog::level::trace);
  std::string order;  // --log-level trace: the prompts' order, before their loops run again
  if (tracing)
    for (const EngineSeq* s : prefill) order += fmt::format(" {}:{}/{}", s->req.id, s->staged.filled, s->post.tokens);
  const double t_prefill = now();
  try {
    serve_prefill(prefill, prompted, rows);
  } catch (...) {  // a request released already has its result and runs on: it is not failed
    std::vector<EngineSeq*> failed;
    for (EngineSeq* s : prefill)
      if (std::find(prompted.begin(), prompted.end(), s) == prompted.end()) {
        s->fail = std::current_exception();
        failed.push_back(s);
      }
    release(failed);
  }
  const double t_decode = now();
  guarded(decode, [&](auto& g) { serve_decode(g); });
  if (tracing) {
    std::string done_now;
    for (const EngineSeq* s : prompted) done_now += " " + s->req.id;
    spdlog::trace("engine step {}: prompts in order (id:staged/tokens){}; first tokens released:{}; prefill {:.1f} ms "
                  "(done at {:.3f} s), decode {} rows {:.1f} ms", counts_.steps, order, done_now,
                  1e3 * (t_decode - t_prefill), t_decode, decode.size(), 1e3 * (now() - t_decode));
  }
  done.insert(done.end(), decode.begin(), decode.end());
  guarded(full, [&](auto& g) { serve_full(g); });
  done.insert(done.end(), full.begin(), full.end());
  const double t = now();
  for (PendingRow& r : rows) r.seq->row = kv_->add(*r.cache, r.row, r.pad, r.tokens);
  add_copy(now() - t);
  release(done);
}

void Engine::add_copy(double seconds) {
  std::lock_guard lk(mu_);
  counts_.copy_s += seconds;
}

void Engine::release(const std::vector<EngineSeq*>& seqs) {
  std::lock_guard lk(mu_);
  for (EngineSeq* s : seqs) {
    s->served = true;
    s->phase = EngineSeq::Phase::Computing;  // not parked any more, though its thread has yet to wake
    ++s->forwards;
    s->cv.notify_all();
  }
}

void Engine::serve_decode(std::vector<EngineSeq*>& seqs) {
  std::sort(seqs.begin(), seqs.end(), [](const EngineSeq* a, const EngineSeq* b) { return a->row < b->row; });
  const std::int64_t B = kv_->rows();
  if (static_cast<std::int64_t>(seqs.size()) != B)
    runtime_error("engine: {} decode posts for {} rows of the KV cache", seqs.size(), B);
  kv_->reserve_one();
  StepInput in;
  in.batch = B;
  in.tokens = 1;
  in.past = kv_->filled();
  in.use_cache = true;
  in.last_logits_only = true;
  in.need_logits = false;
  for (std::int64_t r = 0; r < B; ++r) {
    const EngineSeq& s = *seqs[static_cast<std::size_t>(r)];
    const StepInput& p = s.post;
    if (s.row != r || p.batch != 1 || p.tokens != 1 || p.past != kv_->length(r))
      runtime_error("engine: request '{}' posted {} x {} tokens after {} cached slots; its row {} holds {}", s.req.id,
                    p.batch, p.tokens, p.past, s.row, kv_->length(r));
    in.ids.push_back(p.ids.at(0));
    in.positions.push_back(p.positions.at(0));
    in.need_logits = in.need_logits || p.need_logits;
  }
  in.key_mask = kv_->decode_mask();
  const std::vector<std::int64_t> zero(static_cast<std::size_t>(B), 0), one(static_cast<std::size_t>(B), 1);
  const Tensor logits = run_forward(in, &kv_->cache(), nullptr, seqs, zero, one, false);
  kv_->appended();
  const double t = now();
  for (std::int64_t r = 0; r < B; ++r) {
    EngineSeq& s = *seqs[static_cast<std::size_t>(r)];
    s.result = s.post.need_logits ? logits_rows(logits, r, 1, 0, 1) : Tensor();
  }
  add_copy(now() - t);
}

// Posts of any lengths right-aligned into one left-padded batch (decode.h, left_pad): pad slots
// masked at position 1, so each row computes as it would alone. `rows`, `pad` and `tokens` get
// each batch row's request, left padding and own length.
StepInput Engine::padded(const std::vector<EngineSeq*>& seqs, std::vector<EngineSeq*>& rows, std::vector<std::int64_t>& pad,
                         std::vector<std::int64_t>& tokens) {
  StepInput in;
  bool mask = false;
  in.last_logits_only = true;
  in.need_logits = false;
  for (const EngineSeq* s : seqs) {
    in.tokens = std::max(in.tokens, s->post.tokens);
    mask = mask || !s->post.key_mask.empty();
    in.last_logits_only = in.last_logits_only && s->post.last_logits_only;
    in.need_logits = in.need_logits || s->post.need_logits;
  }
  const std::int64_t T = in.tokens;
  for (EngineSeq* s : seqs) {
    const StepInput& p = s->post;
    mask = mask || p.tokens != T;
    for (std::int64_t b = 0; b < p.batch; ++b) {
      rows.push_back(s);
      pad.push_back(T - p.tokens);
      tokens.push_back(p.tokens);
    }
  }
  // The head's slots: the union of the posts' ranges (StepInput::logits_from) in the padded
  // slots; a post that reads every slot's logits widens it to all.
  std::int64_t from = T, to = 0;
  bool ranged = true;
  for (const EngineSeq* s : seqs) {
    const StepInput& p = s->post;
    if (!p.need_logits) continue;
    ranged = ranged && p.logits_from < p.logits_to;
    from = std::min(from, T - p.tokens + p.logits_from), to = std::max(to, T - p.tokens + p.logits_to);
  }
  if (ranged && from < to) in.logits_from = from, in.logits_to = to;
  in.batch = static_cast<std::int64_t>(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const StepInput& p = rows[i]->post;
    const std::int64_t b = static_cast<std::int64_t>(i) - (std::find(rows.begin(), rows.end(), rows[i]) - rows.begin());
    const std::int64_t n = p.tokens, at = b * n;
    in.ids.insert(in.ids.end(), static_cast<std::size_t>(pad[i]), 0);
    in.ids.insert(in.ids.end(), p.ids.begin() + at, p.ids.begin() + at + n);
    in.positions.insert(in.positions.end(), static_cast<std::size_t>(pad[i]), 1);
    in.positions.insert(in.positions.end(), p.positions.begin() + at, p.positions.begin() + at + n);
    if (!mask) continue;
    in.key_mask.insert(in.key_mask.end(), static_cast<std::size_t>(pad[i]), 0);
    if (p.key_mask.empty())
      in.key_mask.insert(in.key_mask.end(), static_cast<std::size_t>(n), 1);
    else
      in.key_mask.insert(in.key_mask.end(), p.key_mask.begin() + at, p.key_mask.begin() + at + n);
  }
  return in;
}

// Each request's share of a padded forward's logits: its rows, its own slots (or, when the head
// ran on the padded slots [first, first + slots) alone, its own range's slots, or the last slot).
void Engine::split_logits(const Tensor& logits, const std::vector<EngineSeq*>& rows, const std::vector<std::int64_t>& pad,
                          std::int64_t T, std::int64_t first) {
  const std::int64_t slots = logits.empty() ? 0 : logits.shape()[1];
  const bool sliced = slots != T;
  for (std::size_t i = 0; i < rows.size();) {
    EngineSeq& s = *rows[i];
    const StepInput& p = s.post;
    const auto row = static_cast<std::int64_t>(i);
    if (!p.need_logits)
      s.result = Tensor();
    else if (sliced && p.logits_from < p.logits_to)
      s.result = logits_rows(logits, row, p.batch, pad[i] + p.logits_from - first, p.logits_to - p.logits_from);
    else if (sliced)  // the last slot alone
      s.result = logits_rows(logits, row, p.batch, 0, 1);
    else
      s.result = logits_rows(logits, row, p.batch, pad[i], p.tokens);
    i += static_cast<std::size_t>(p.batch);
  }
}

// Shortest remaining prompt first (SRPT: the order that minimises mean waiting time on one server,
// Schrage 1968), aged so that no prompt starves: each step a prompt has waited counts as a step's
// budget of tokens off its length. A prompt of n tokens thus goes ahead of one that arrives
// n / prefill_chunk steps after it, whatever their lengths, and a short request's first token
// does not wait for every longer prompt that came before it. Ties (and equal keys) by arrival.
void Engine::order_prompts(std::vector<EngineSeq*>& seqs) {
  const std::int64_t now = counts_.steps;  // written only by step(), which is running this
  for (EngineSeq* s : seqs)
    if (s->prompt_step < 0) s->prompt_step = now;
  const auto key = [&](const EngineSeq* s) {
    const std::int64_t left = s->post.tokens - s->staged.filled;
    return left - (now - s->prompt_step) * options_.prefill_chunk;
  };
  std::stable_sort(seqs.begin(), seqs.end(), [&](const EngineSeq* a, const EngineSeq* b) { return key(a) < key(b); });
}

// Prompts in the order of order_prompts, within the step's budget of prompt tokens. The prompts that fit whole
// are prefilled together, one left-padded forward into a cache of their own, and move into rows
// of the shared cache; then the next prompt gets what is left of the budget as a chunk into its
// own cache, continued at later steps (a prompt whose logits are wanted at every slot is not cut:
// its result would need every chunk's). The budget counts the padded forward's rows x slots, the
// work it does: prompts of 16 and 200 tokens padded together would compute 400 slots for 216.
void Engine::serve_prefill(std::vector<EngineSeq*>& seqs, std::vector<EngineSeq*>& prompted,
                           std::vector<PendingRow>& rows) {
  std::vector<EngineSeq*> whole;
  std::int64_t longest = 0;
  std::size_t i = 0;
  for (; i < seqs.size(); ++i) {
    EngineSeq* s = seqs[i];
    const StepInput& p = s->post;
    if (p.batch != 1 || p.past != 0)
      runtime_error("engine: request '{}' posted a cached forward of {} rows after {} slots before its prompt was in",
                    s->req.id, p.batch, p.past);
    const std::int64_t padded_work = static_cast<std::int64_t>(whole.size() + 1) * std::max(longest, p.tokens);
    if (!s->staged.k.empty() || padded_work > options_.prefill_chunk) break;
    whole.push_back(s);
    longest = std::max(longest, p.tokens);
  }
  const std::int64_t budget = options_.prefill_chunk - static_cast<std::int64_t>(whole.size()) * longest;
  if (!whole.empty()) {
    std::vector<EngineSeq*> batch;
    std::vector<std::int64_t> pad, tokens;
    StepInput in = padded(whole, batch, pad, tokens);
    in.use_cache = true;
    auto staged = std::make_shared<KvCache>(model_.new_cache(in.batch, in.tokens));
    const Tensor logits = run_forward(in, staged.get(), nullptr, batch, pad, tokens, false);
    split_logits(logits, batch, pad, in.tokens, in.logits_from);
    for (std::size_t r = 0; r < batch.size(); ++r) rows.push_back({batch[r], staged, static_cast<std::int64_t>(r), pad[r], tokens[r]});
    // Their first tokens go out now, not after the chunk forward below: it is not theirs to wait for.
    release(whole);
    prompted.insert(prompted.end(), whole.begin(), whole.end());
  }
  if (i == seqs.size() || budget <= 0) return;
  EngineSeq* s = seqs[i];
  const StepInput& p = s->post;
  if (s->staged.k.empty()) s->staged = model_.new_cache(1, p.tokens);
  const std::int64_t from = s->staged.filled;
  const bool cut_ok = !(p.need_logits && !p.last_logits_only);
  const std::int64_t n = cut_ok ? std::min(p.tokens - from, budget) : p.tokens - from;
  const bool last = from + n == p.tokens;
  StepInput c;
  c.batch = 1;
  c.tokens = n;
  c.past = from;
  c.use_cache = true;
  c.ids.assign(p.ids.begin() + from, p.ids.begin() + from + n);
  c.positions.assign(p.positions.begin() + from, p.positions.begin() + from + n);
  if (!p.key_mask.empty()) c.key_mask.assign(p.key_mask.begin(), p.key_mask.begin() + from + n);
  c.need_logits = last && p.need_logits;
  c.last_logits_only = p.last_logits_only;
  Tensor out = run_forward(c, &s->staged, nullptr, {s}, {0}, {n}, true);
  if (!last) return;
  for (auto& [hook, parts] : s->chunk_taps) {
    const Tensor joined = join_slots(parts);
    s->tap(hook, joined.view());
  }
  s->chunk_taps.clear();
  s->result = std::move(out);
  rows.push_back({s, std::make_shared<KvCache>(std::move(s->staged)), 0, 0, p.tokens});
  s->staged = KvCache{};
  release({s});
  prompted.push_back(s);
}

void Engine::serve_full(std::vector<EngineSeq*>& seqs) {
  std::vector<EngineSeq*> rows;
  std::vector<std::int64_t> pad, tokens;
  const StepInput in = padded(seqs, rows, pad, tokens);
  const Tensor logits = run_forward(in, nullptr, nullptr, rows, pad, tokens, false);
  split_logits(logits, rows, pad, in.tokens, in.logits_from);
}

void Engine::serve_alone(EngineSeq& s) {
  const StepInput& p = s.post;
  try {
    const std::vector<EngineSeq*> rows(static_cast<std::size_t>(p.batch), &s);
    const std::vector<std::int64_t> pad(rows.size(), 0), tokens(rows.size(), p.tokens);
    s.result = run_forward(p, &s.own, &s.scratch, rows, pad, tokens, false);
  } catch (...) {
    s.fail = std::current_exception();
  }
}

}  // namespace sonde
