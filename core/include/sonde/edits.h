#pragma once
// Edits (interventions) at hook points: add a vector, scale, zero, replace with a mean, project
// out or clamp a direction, patch in rows of another run, or call a host function. An edit is a
// graph node inserted right after the node carrying its hook (insert_edits), so every consumer
// reads the edited tensor, a captured hook records the edited value, and the value before the
// edit stays available as `<hook>.pre_edit`. Which rows change is decided per forward call
// (EditCall: prompt lengths, step) and fed to the node as a [B,T,G] selection, so one planned
// graph serves every decode or denoising step. With no edits, nothing is inserted.
#include <sonde/graph.h>
#include <sonde/tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace sonde {

// Which slots an edit changes: all real slots, prompt slots, generated slots (positions at or
// after the row's prompt length), or the listed positions (0 = the row's first real token).
struct EditPositions {
  enum class Kind { All, Prompt, Generated, List } kind = Kind::All;
  std::vector<std::int64_t> list;
  bool contains(std::int64_t pos, std::int64_t prompt_len) const;
};

// Which forward calls of a generation an edit applies to: every one, steps [first, last], or
// every K-th (0, K, 2K, ...). A diffusion generation's step s is its s-th forward (the extra
// forward of diffusion_capture=final is step `steps`); an autoregressive one accepts `all` only.
struct EditSteps {
  enum class Kind { All, Range, Every } kind = Kind::All;
  std::int64_t first = 0, last = 0, every = 1;
  bool contains(std::int64_t step) const;
};

// What a host edit (a C++ or Python function) sees at its node. `value` is writable: it is the
// edit node's output, a copy of the hooked tensor, and what every consumer reads afterwards.
struct HostEditContext {
  const std::string& hook;
  TensorView value;      // [B, T, *row] f32
  TensorView selected;   // [B, T, G] u8: the edit's positions, steps and heads for this call
  TensorView positions;  // [B, T] i32: each slot's position in its sequence
  std::int64_t step = 0;
};
using EditFn = std::function<void(const HostEditContext&)>;
struct HostEdit {
  EditFn fn;
};

enum class EditOp { Add, Scale, Zero, Mean, ProjectOut, Clamp, Patch, Host };
std::string edit_op_name(EditOp op);

// Rows of an earlier run to patch in, by prompt id and position (and denoising step): row_elems
// floats, or null when the source has no such row.
class PatchRows {
 public:
  virtual ~PatchRows() = default;
  virtual std::int64_t row_elems() const = 0;
  virtual const float* row(const std::string& prompt_id, std::int64_t pos, std::int64_t step) const = 0;
};

// One resolved edit, ready to insert (run_edits.cpp makes them from EditSpecs; a caller may
// build one directly, e.g. a host edit).
struct Edit {
  std::string hook;                 // canonical name of one hook point
  EditOp op = EditOp::Add;
  float scale = 1.0f;               // add: x + scale * v; scale: x * scale
  float value = 0.0f;               // clamp: the component along d is set to this
  Tensor operand;                   // [G, E] f32: add's vector, mean's rows, the unit direction
  std::int64_t groups = 1;          // G: 1, or the heads of a per-head hook
  std::vector<std::int64_t> heads;  // groups changed (empty: all)
  EditPositions positions;
  EditSteps steps;
  std::shared_ptr<const PatchRows> patch;
  EditFn fn;                        // op Host
  // The request whose rows it changes when several share a forward (engine.h): rows whose
  // EditCall::row_owner differs are left alone. -1: every row.
  std::int64_t owner = -1;
};

// What decides an edit's rows in one forward call.
struct EditCall {
  std::vector<std::int64_t> prompt_len;  // per batch row; empty: every slot is a prompt slot
  std::vector<std::string> prompt_id;    // per batch row (patch)
  std::int64_t step = 0;
  // Rows of several requests in one forward (engine.h): each row's own step and owner; empty:
  // `step` for every row, and every row belongs to every edit.
  std::vector<std::int64_t> row_step, row_owner;
};

// Inserts each edit's node after the node named edit.hook (in order: two edits on one hook
// chain), rewiring its consumers and the graph's outputs; the hooked node's names move to the
// edit node and the node keeps them with ".pre_edit" appended. Runtime error for a missing hook.
void insert_edits(Graph& g, const std::vector<Edit>& edits);

// The Input feeds of the inserted nodes for one call over B x T slots: `positions` [B*T];
// `mask` [B*(past+T)] or empty; storage keeps what the views point at.
void edit_feeds(const std::vector<Edit>& edits, const EditCall& call, std::int64_t B, std::int64_t T,
                std::int64_t past, const std::vector<std::int32_t>& positions, const std::vector<std::uint8_t>& mask,
                std::vector<Tensor>& storage, std::map<std::string, TensorView>& feeds);

}  // namespace sonde
