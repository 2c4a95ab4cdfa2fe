// Left padding shared by both loops (model-spec §0.8, §1.3).
#include <sonde/decode.h>
#include <sonde/error.h>

#include <algorithm>

namespace sonde {

void DecodeForward::set_taps(const std::vector<std::string>& hooks, HookTap) {
  if (!hooks.empty()) runtime_error("this forward cannot deliver hooks ({} asked, first '{}')", hooks.size(), hooks[0]);
}

PaddedBatch left_pad(const std::vector<std::vector<std::int32_t>>& prompts, std::int32_t pad_id) {
  if (prompts.empty()) bad_input("no prompts given");
  PaddedBatch pb;
  pb.batch = static_cast<std::int64_t>(prompts.size());
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty()) bad_input("prompt {} is empty", r);
    pb.tokens = std::max<std::int64_t>(pb.tokens, static_cast<std::int64_t>(prompts[r].size()));
  }
  const auto n = static_cast<std::size_t>(pb.batch * pb.tokens);
  pb.ids.assign(n, pad_id);
  pb.positions.assign(n, 1);  // padded slots: position 1 (HF masked_fill_)
  pb.mask.assign(n, 0);
  for (std::size_t r = 0; r < prompts.size(); ++r) {
    const auto len = static_cast<std::int64_t>(prompts[r].size());
    const std::int64_t pad = pb.tokens - len;
    pb.pad.push_back(pad);
    pb.any_pad = pb.any_pad || pad > 0;
    for (std::int64_t j = 0; j < len; ++j) {
      const auto at = static_cast<std::size_t>(static_cast<std::int64_t>(r) * pb.tokens + pad + j);
      pb.ids[at] = prompts[r][static_cast<std::size_t>(j)];
      pb.positions[at] = static_cast<std::int32_t>(j);  // cumsum(mask) - 1
      pb.mask[at] = 1;
    }
  }
  return pb;
}

}  // namespace sonde
