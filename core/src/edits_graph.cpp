// Edits as graph nodes (edits.h): insertion after the hooked node, and each call's feeds.
#include <sonde/edits.h>
#include <sonde/error.h>

#include <algorithm>
#include <cstring>

namespace sonde {

std::string edit_op_name(EditOp op) {
  switch (op) {
    case EditOp::Add: return "add";
    case EditOp::Scale: return "scale";
    case EditOp::Zero: return "zero";
    case EditOp::Mean: return "mean";
    case EditOp::ProjectOut: return "project_out";
    case EditOp::Clamp: return "clamp";
    case EditOp::Patch: return "patch";
    case EditOp::Host: return "host";
  }
  return "?";
}

bool EditPositions::contains(std::int64_t pos, std::int64_t prompt_len) const {
  switch (kind) {
    case Kind::All: return true;
    case Kind::Prompt: return pos < prompt_len;
    case Kind::Generated: return pos >= prompt_len;
    case Kind::List: return std::find(list.begin(), list.end(), pos) != list.end();
  }
  return false;
}

bool EditSteps::contains(std::int64_t step) const {
  switch (kind) {
    case Kind::All: return true;
    case Kind::Range: return step >= first && step <= last;
    case Kind::Every: return every > 0 && step % every == 0;
  }
  return false;
}

namespace {

std::string feed_name(std::size_t k, const char* what) { return "edit." + std::to_string(k) + "." + what; }

bool is_edit(OpKind op) {
  return op == OpKind::EditAffine || op == OpKind::EditReplace || op == OpKind::EditProject || op == OpKind::EditHost;
}

Node input_node(const std::string& ref, DType dtype, const Shape& shape) {
  Node n;
  n.op = OpKind::Input;
  n.params.ref = ref;
  n.dtype = dtype;
  n.shape = shape;
  n.names.push_back("input." + ref);
  return n;
}

// The edit's node (inputs filled in by the caller: x, sel [, operand]).
Node edit_node(const Edit& e) {
  Node n;
  n.params.edit_groups = e.groups;
  switch (e.op) {
    case EditOp::Add: n.op = OpKind::EditAffine; n.params.edit_a = 1; n.params.edit_b = e.scale; break;
    case EditOp::Scale: n.op = OpKind::EditAffine; n.params.edit_a = e.scale; break;
    case EditOp::Zero: n.op = OpKind::EditAffine; n.params.edit_a = 0; break;
    case EditOp::Mean:
    case EditOp::Patch: n.op = OpKind::EditReplace; break;
    case EditOp::ProjectOut: n.op = OpKind::EditProject; n.params.edit_b = 0; break;
    case EditOp::Clamp: n.op = OpKind::EditProject; n.params.edit_b = e.value; break;
    case EditOp::Host:
      n.op = OpKind::EditHost;
      n.params.host = std::make_shared<HostEdit>(HostEdit{e.fn});
      break;
  }
  n.dtype = DType::f32;
  return n;
}

bool has_operand(const Edit& e) {
  return e.op == EditOp::Add || e.op == EditOp::Mean || e.op == EditOp::ProjectOut || e.op == EditOp::Clamp ||
         e.op == EditOp::Patch || e.op == EditOp::Host;
}

// Inserts `block` (Inputs first, the edit node last, inputs given relative to the block's start
// as -1 - k, or as graph ids <= at) after node `at`, and makes every later reader of `at` read
// the block's last node instead.
void insert_after(Graph& g, int at, std::vector<Node> block) {
  const int m = static_cast<int>(block.size());
  const int first = at + 1, edited = at + m;
  for (auto& n : g.nodes)
    for (int& in : n.inputs)
      if (in > at) in += m;
  for (std::size_t i = static_cast<std::size_t>(first); i < g.nodes.size(); ++i)
    for (int& in : g.nodes[i].inputs)
      if (in == at) in = edited;
  for (auto& [name, id] : g.outputs) id = id > at ? id + m : (id == at ? edited : id);
  for (auto& n : block)
    for (int& in : n.inputs)
      if (in < 0) in = first + (-1 - in);
  g.nodes.insert(g.nodes.begin() + first, std::make_move_iterator(block.begin()), std::make_move_iterator(block.end()));
}

}  // namespace

void insert_edits(Graph& g, const std::vector<Edit>& edits) {
  for (std::size_t k = 0; k < edits.size(); ++k) {
    const Edit& e = edits[k];
    const auto found = g.find(e.hook);
    if (!found) runtime_error("edit {}: the graph has no node '{}'", k, e.hook);
    const int at = *found;
    Node& hooked = g.nodes[static_cast<std::size_t>(at)];
    const Shape& x = hooked.shape;
    if (x.rank < 3) runtime_error("edit {}: hook '{}' has shape {}, not [B,T,*row]", k, e.hook, x.str());
    const std::int64_t row = x.numel() / std::max<std::int64_t>(1, x[0] * x[1]);

    std::vector<Node> block;
    block.push_back(input_node(feed_name(k, "sel"), DType::u8, Shape{x[0], x[1], e.groups}));
    if (has_operand(e)) {
      const Shape vs = e.op == EditOp::Host    ? Shape{x[0], x[1]}
                       : e.op == EditOp::Patch ? Shape{x[0], x[1], e.groups, row / e.groups}
                                               : Shape{e.groups, row / e.groups};
      block.push_back(input_node(feed_name(k, e.op == EditOp::Host ? "pos" : "v"), e.op == EditOp::Host ? DType::i32 : DType::f32, vs));
    }
    if (e.op == EditOp::Host) block.push_back(input_node(feed_name(k, "step"), DType::i32, Shape{1}));
    Node n = edit_node(e);
    n.inputs.push_back(at);
    for (int j = 0; j < static_cast<int>(block.size()); ++j) n.inputs.push_back(-1 - j);
    n.shape = x;
    // The hooked names now mean the edited value; an earlier edit of the same hook keeps none,
    // so `<hook>.pre_edit` stays the value before the first edit.
    n.names = std::move(hooked.names);
    hooked.names.clear();
    if (!is_edit(hooked.op))
      for (const auto& name : n.names) hooked.names.push_back(name + ".pre_edit");
    if (hooked.dtype != DType::f32) runtime_error("edit {}: hook '{}' is {}, edits take f32", k, e.hook, dtype_name(hooked.dtype));
    block.push_back(std::move(n));
    insert_after(g, at, std::move(block));
  }
}

void edit_feeds(const std::vector<Edit>& edits, const EditCall& call, std::int64_t B, std::int64_t T, std::int64_t past,
                const std::vector<std::int32_t>& positions, const std::vector<std::uint8_t>& mask,
                std::vector<Tensor>& storage, std::map<std::string, TensorView>& feeds) {
  const auto real = [&](std::int64_t b, std::int64_t t) {
    return mask.empty() || mask[static_cast<std::size_t>(b * (past + T) + past + t)] != 0;
  };
  const auto prompt_len = [&](std::int64_t b) {
    return call.prompt_len.empty() ? std::int64_t{1} << 62 : call.prompt_len.at(static_cast<std::size_t>(b));
  };
  const auto step_of = [&](std::int64_t b) {
    return call.row_step.empty() ? call.step : call.row_step.at(static_cast<std::size_t>(b));
  };
  const auto mine = [&](const Edit& e, std::int64_t b) {
    return e.owner < 0 || call.row_owner.empty() || call.row_owner.at(static_cast<std::size_t>(b)) == e.owner;
  };
  for (std::size_t k = 0; k < edits.size(); ++k) {
    const Edit& e = edits[k];
    const std::int64_t G = e.groups;
    Tensor& sel = storage.emplace_back(DType::u8, Shape{B, T, G});
    auto* s = sel.data<std::uint8_t>();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::int64_t pos = positions[static_cast<std::size_t>(b * T + t)];
        const bool on = mine(e, b) && e.steps.contains(step_of(b)) && real(b, t) && e.positions.contains(pos, prompt_len(b));
        for (std::int64_t g = 0; g < G; ++g)
          s[(b * T + t) * G + g] =
              on && (e.heads.empty() || std::find(e.heads.begin(), e.heads.end(), g) != e.heads.end());
      }
    feeds[feed_name(k, "sel")] = sel.view();
    if (e.op == EditOp::Host) {
      feeds[feed_name(k, "pos")] = TensorView(const_cast<std::int32_t*>(positions.data()), DType::i32, Shape{B, T});
      Tensor& step = storage.emplace_back(DType::i32, Shape{1});
      // A host function sees one step: that of the first row it owns (its request's).
      std::int64_t at = call.step;
      for (std::int64_t b = 0; b < B; ++b)
        if (mine(e, b)) {
          at = step_of(b);
          break;
        }
      step.data<std::int32_t>()[0] = static_cast<std::int32_t>(at);
      feeds[feed_name(k, "step")] = step.view();
    } else if (e.op == EditOp::Patch) {
      const std::int64_t E = e.patch->row_elems();
      Tensor& v = storage.emplace_back(DType::f32, Shape{B, T, G, E / G});
      for (std::int64_t r = 0; r < B * T; ++r) {
        bool any = false;
        for (std::int64_t g = 0; g < G; ++g) any = any || s[r * G + g];
        if (!any) continue;
        const std::string& id = call.prompt_id.at(static_cast<std::size_t>(r / T));
        const std::int64_t pos = positions[static_cast<std::size_t>(r)];
        const std::int64_t step = step_of(r / T);
        const float* src = e.patch->row(id, pos, step);
        if (!src) runtime_error("patch of '{}': the source has no row for prompt '{}' at position {} (step {})", e.hook, id, pos, step);
        std::memcpy(v.data<float>() + r * E, src, static_cast<std::size_t>(E) * sizeof(float));
      }
      feeds[feed_name(k, "v")] = v.view();
    } else if (!e.operand.empty()) {
      feeds[feed_name(k, "v")] = e.operand.view();
    }
  }
}

}  // namespace sonde
