#pragma once
// Pieces the exact and the block-wise diffusion loops share (decode_diffusion*.cpp).
#include <sonde/decode.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace sonde::diffusion_detail {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Canvas {
  std::int64_t B = 0, N = 0, T = 0;
  std::vector<std::int32_t> x;    // [B, N]
  StepInput input;                // ids refreshed from x every step
  std::vector<std::int64_t> pad;  // left-pad slots per row
};

Canvas make_canvas(const PaddedBatch& pb, const DiffusionOptions& o);

// Indices into conf[0, N) ordered by confidence, highest first, the first k; ties to the lower
// slot (model-spec §0.14).
std::vector<std::int64_t> top_slots(const double* conf, std::int64_t N, std::int64_t k);

// multinomial(softmax(conf / alg_temp), k) without replacement over conf[0, N) (-inf: never).
std::vector<std::int64_t> sample_slots(const double* conf, std::int64_t N, std::int64_t k, double alg_temp,
                                       std::uint64_t seed, std::int64_t step);

// The shifted logits of slot j: slot 0 keeps its own, slot j > 0 uses slot j - 1. logits is
// [B, N, V] over slots [first, first + N) of the canvas (first > 0: a cached range forward).
std::span<const float> shifted_row(const Tensor& logits, std::int64_t r, std::int64_t j, std::int64_t N,
                                   std::int64_t V, std::int64_t first = 0);

// The canvas slots [from, to) whose logits a step reads for the slots `reads` marks ([B, N];
// shift 1: slot j reads slot j - 1's, slot 0 its own), set on `in` (StepInput::logits_from) so
// that the LM head runs there alone; nothing marked: every slot.
void set_head_slots(StepInput& in, const std::vector<bool>& reads, std::int64_t B, std::int64_t N, int shift);

// The canvas slot of the first row of logits a forward returned for in.tokens slots: in.logits_from
// when the head ran on its range alone, else 0.
std::int64_t head_first(const Tensor& logits, const StepInput& in);

DiffusionResult make_result(const Canvas& c, const std::vector<std::vector<std::int32_t>>& prompts,
                            const DiffusionOptions& o);

// The block-wise loop: block mode, and exact mode with confidence_threshold or tokens_per_step.
DiffusionResult blockwise_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& o, const DiffusionCallback& on_step);

// LLaDA's generate() (DiffusionLoop::SemiArRemasking): decode_diffusion_remasking.cpp.
DiffusionResult remasking_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                   const DiffusionOptions& o, const DiffusionCallback& on_step);

// Fast-dLLM v2's batch_sample (DiffusionLoop::BlockDiffusion): decode_diffusion_bd.cpp.
DiffusionResult block_diffusion_generate(DecodeForward& model, const std::vector<std::vector<std::int32_t>>& prompts,
                                         const DiffusionOptions& o, const DiffusionCallback& on_step);

}  // namespace sonde::diffusion_detail
