// Autoregressive generation (model-spec §4): prefill, then one token per row per step, reading
// earlier keys from the KV cache. Each row's draws come from counter_uniform(seed_row, step), so
// a row's tokens do not depend on the batch it runs in.
#include <sonde/decode.h>
#include <sonde/error.h>

#include <algorithm>

namespace sonde {
namespace {

struct ArState {
  std::int64_t batch = 0, width = 0;           // width: slots so far (padded prompt + steps)
  std::vector<std::vector<std::int32_t>> ids;  // per row, padded
  std::vector<std::vector<std::uint8_t>> mask;
  std::vector<std::int32_t> next_position;     // per row: cumsum(mask) - 1 of the next slot
  bool any_pad = false;
};

ArState start(const PaddedBatch& pb) {
  ArState s{pb.batch, pb.tokens, {}, {}, {}, pb.any_pad};
  for (std::int64_t r = 0; r < pb.batch; ++r) {
    auto b = pb.ids.begin() + r * pb.tokens;
    s.ids.emplace_back(b, b + pb.tokens);
    auto m = pb.mask.begin() + r * pb.tokens;
    s.mask.emplace_back(m, m + pb.tokens);
    s.next_position.push_back(static_cast<std::int32_t>(pb.tokens - pb.pad[static_cast<std::size_t>(r)]));
  }
  return s;
}

// The forward input for slots [from, width) of every row; keys are slots [0, width).
StepInput step_input(const ArState& s, std::int64_t from, bool cached) {
  StepInput in{s.batch, s.width - from, cached ? from : 0, {}, {}, {}, cached};
  for (std::int64_t r = 0; r < s.batch; ++r) {
    const auto& row = s.ids[static_cast<std::size_t>(r)];
    const auto& m = s.mask[static_cast<std::size_t>(r)];
    std::int32_t pos = s.next_position[static_cast<std::size_t>(r)] - static_cast<std::int32_t>(s.width - from);
    for (std::int64_t j = from; j < s.width; ++j) {
      in.ids.push_back(row[static_cast<std::size_t>(j)]);
      // Real slots count up from the row's first real token; pad slots sit at position 1.
      const bool real = m[static_cast<std::size_t>(j)] != 0;
      const std::int32_t p = pos++;
      in.positions.push_back(real ? p : 1);
    }
    if (s.any_pad) in.key_mask.insert(in.key_mask.end(), m.begin(), m.end());
  }
  return in;
}

// Appends the new column: finished rows feed the pad id (their outputs are ignored).
void append_column(ArState& s, const std::vector<std::int32_t>& chosen, std::int32_t pad_id) {
  for (std::size_t r = 0; r < chosen.size(); ++r) {
    s.ids[r].push_back(chosen[r] >= 0 ? chosen[r] : pad_id);
    s.mask[r].push_back(1);
    s.next_position[r] += 1;
  }
  s.width += 1;
}

bool hits_stop_string(const ArOptions& o, const std::vector<std::int32_t>& tokens) {
  if (o.stop_strings.empty() || !o.detokenize) return false;
  const std::string text = o.detokenize(tokens);
  return std::any_of(o.stop_strings.begin(), o.stop_strings.end(),
                     [&](const std::string& st) { return !st.empty() && text.find(st) != std::string::npos; });
}

}  // namespace

std::vector<Completion> generate_autoregressive(DecodeForward& model,
                                                const std::vector<std::vector<std::int32_t>>& prompts,
                                                const ArOptions& o, const ArCallback& on_step) {
  if (o.max_new_tokens < 1) bad_input("max_new_tokens must be at least 1, got {}", o.max_new_tokens);
  const PaddedBatch pb = left_pad(prompts, o.pad_id);
  ArState s = start(pb);
  const bool cached = o.use_cache && model.has_kv_cache();
  if (cached) model.reset_cache(s.batch, pb.tokens + o.max_new_tokens);

  std::vector<Completion> out(prompts.size());
  for (std::size_t r = 0; r < prompts.size(); ++r) out[r].prompt = prompts[r];
  std::vector<bool> done(prompts.size(), false);
  std::int64_t fed = 0;  // slots whose keys are already in the cache
  const auto V = model.vocab_size();

  for (std::int64_t step = 0; step < o.max_new_tokens; ++step) {
    StepInput in = step_input(s, cached ? fed : 0, cached);
    in.last_logits_only = true;  // a prefill's head runs at each row's last slot alone
    const Tensor logits = model.forward(in);
    const std::int64_t rows = logits.shape()[1];  // in.tokens, or 1 when the head ran at the last slot only
    fed = s.width;
    Tensor last(DType::f32, Shape{s.batch, V});
    std::vector<std::int32_t> chosen(prompts.size(), -1);
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      const float* row = logits.data<float>() + (static_cast<std::int64_t>(r) * rows + rows - 1) * V;
      float* dst = last.data<float>() + static_cast<std::int64_t>(r) * V;
      std::copy(row, row + V, dst);
      if (done[r]) continue;
      std::vector<std::int32_t> history = out[r].prompt;
      history.insert(history.end(), out[r].tokens.begin(), out[r].tokens.end());
      const std::uint64_t seed = o.seeds.empty() ? 0 : o.seeds.at(r);
      std::vector<float> work(dst, dst + V);
      chosen[r] = choose_next_token(work, o.sampling, history,
                                    counter_uniform(seed, static_cast<std::uint64_t>(step), 0, RngStream::Token));
      out[r].tokens.push_back(chosen[r]);
      if (std::find(o.eos_ids.begin(), o.eos_ids.end(), chosen[r]) != o.eos_ids.end()) {
        done[r] = true;
        out[r].finish_reason = "eos";
      } else if (hits_stop_string(o, out[r].tokens)) {
        done[r] = true;
        out[r].finish_reason = "stop";
      }
    }
    if (on_step) on_step(ArStep{step, chosen, last});
    const bool all_done = std::all_of(done.begin(), done.end(), [](bool d) { return d; });
    if (all_done && !o.feed_last) break;
    append_column(s, chosen, o.pad_id);
    if (all_done) break;
  }
  // The last tokens' own forward (capture sees their activations); its logits are unused.
  if (o.feed_last) {
    StepInput last_in = step_input(s, cached ? fed : 0, cached);
    last_in.need_logits = false;  // only its taps matter: the LM head is skipped
    model.forward(last_in);
  }
  for (auto& c : out)
    if (c.finish_reason.empty()) c.finish_reason = "length";
  return out;
}

}  // namespace sonde
