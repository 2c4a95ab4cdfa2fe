// Planning: mark what the requested outputs and the tapped hooks need (walking inputs backwards),
// choose a backend per node, and record each buffer's last reader so it is freed right after.
#include <sonde/edits.h>
#include <sonde/error.h>
#include <sonde/executor.h>
#include <sonde/log.h>
#include <sonde/op_checks.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <utility>

namespace sonde {

// Holds what a forward of a few thousand tokens frees, its logits included (600 KB per token on
// Qwen2.5: 1.2 GB at 2048); BufferPool::next_round lets go of what the next forward does not
// take again, so a long prefill's buffers do not stay through the decode steps after it.
constexpr std::size_t kKeptBufferBytes = std::size_t{2} << 30;

Executor::Executor(Backend& primary, Backend& reference)
    : primary_(primary), reference_(reference), buffers_(kKeptBufferBytes) {}

namespace {

std::vector<DType> input_dtypes(const Graph& g, const Node& n) {
  std::vector<DType> d;
  d.reserve(n.inputs.size());
  for (int i : n.inputs) d.push_back(g.nodes[static_cast<std::size_t>(i)].dtype);
  return d;
}

// Nothing such a group reads is computed between its first node and its last, so all can run
// at the first one's step; their outputs would all be alive together anyway (q, k and v until
// the attention, gate and up until their product).
void group_siblings(const Graph& g, Plan& p) {
  p.sibling_group.assign(g.nodes.size(), -1);
  std::map<std::pair<int, const Backend*>, std::size_t> by_input;
  std::vector<std::vector<int>> groups;
  for (int i : p.order) {
    const Node& node = g.nodes[static_cast<std::size_t>(i)];
    if (node.op != OpKind::Linear || node.inputs.empty()) continue;
    bool weights_only = true;
    for (std::size_t k = 1; k < node.inputs.size(); ++k)
      weights_only = weights_only && g.nodes[static_cast<std::size_t>(node.inputs[k])].op == OpKind::Weight;
    if (!weights_only) continue;
    auto [it, fresh] = by_input.try_emplace({node.inputs[0], p.backend[static_cast<std::size_t>(i)]}, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  for (auto& members : groups) {
    if (members.size() < 2) continue;
    for (int i : members) p.sibling_group[static_cast<std::size_t>(i)] = static_cast<int>(p.siblings.size());
    p.siblings.push_back(std::move(members));
  }
}

// The executor runs a host edit itself, on host memory, whatever the backend: the callback gets
// a copy of the hooked value to rewrite in place.
void run_host_edit(const Node& node, const std::vector<TensorView>& in, const TensorView& out) {
  const Tensor x = in[0].contiguous() && in[0].dtype == DType::f32 ? Tensor() : to_f32(in[0]);
  const TensorView& src = x.empty() ? in[0] : x.view();
  std::memcpy(out.data, src.data, out.nbytes());
  if (node.params.host && node.params.host->fn)
    node.params.host->fn(HostEditContext{node.name(), out, in[1], in[2], *in[3].as<const std::int32_t>()});
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A sibling group's one call, shared by output elements: the members read the same rows and K,
// so that is their share of the FLOPs.
void share_sibling_time(const Graph& g, const std::vector<int>& members, double seconds, std::vector<double>& share) {
  double total = 0;
  for (int m : members) total += static_cast<double>(g.nodes[static_cast<std::size_t>(m)].shape.numel());
  for (int m : members)
    share[static_cast<std::size_t>(m)] =
        total > 0 ? seconds * static_cast<double>(g.nodes[static_cast<std::size_t>(m)].shape.numel()) / total : 0.0;
}

}  // namespace

Plan Executor::plan(const Graph& g, const std::vector<std::string>& outputs, const Wants& wants) const {
  const std::size_t n = g.nodes.size();
  Plan p;
  p.graph = &g;
  p.outputs = outputs;
  p.backend.assign(n, nullptr);
  p.last_use.assign(n, -1);
  p.taps.resize(n);
  p.weights.resize(n);

  std::vector<bool> needed(n, false);
  for (const auto& name : outputs) {
    auto id = g.output(name);
    if (!id) runtime_error("graph has no output '{}'", name);
    needed[static_cast<std::size_t>(*id)] = true;
  }
  for (std::size_t i = 0; i < n; ++i)
    for (const auto& name : g.nodes[i].names)
      if (wants && wants(name)) {
        p.taps[i].push_back(name);
        needed[i] = true;
      }
  for (std::size_t i = n; i-- > 0;)
    if (needed[i])
      for (int in : g.nodes[i].inputs) needed[static_cast<std::size_t>(in)] = true;

  std::vector<std::string> fell_back;
  for (std::size_t i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    const Node& node = g.nodes[i];
    for (int in : node.inputs) p.last_use[static_cast<std::size_t>(in)] = static_cast<int>(p.order.size());
    p.order.push_back(static_cast<int>(i));
    if (node.op == OpKind::Weight) p.weights[i] = primary_.weight(node.params.ref);
    if (node.op == OpKind::Input || node.op == OpKind::Weight || node.op == OpKind::EditHost) continue;
    const auto dtypes = input_dtypes(g, node);
    if (primary_.supports(node, dtypes)) {
      p.backend[i] = &primary_;
    } else if (reference_.supports(node, dtypes)) {
      p.backend[i] = &reference_;
      std::string note = fmt::format("{} -> reference", op_name(node.op));
      if (std::find(fell_back.begin(), fell_back.end(), note) == fell_back.end()) fell_back.push_back(note);
    } else {
      runtime_error("no backend runs node '{}' ({})", node.name(), op_name(node.op));
    }
  }
  // Outputs live to the end.
  for (const auto& name : outputs) p.last_use[static_cast<std::size_t>(*g.output(name))] = static_cast<int>(p.order.size());
  if (!fell_back.empty()) {
    std::string list;
    for (const auto& f : fell_back) list += (list.empty() ? "" : ", ") + f;
    spdlog::info("backend {} does not run every op; falling back: {}", primary_.info().name, list);
  }
  p.fallbacks = std::move(fell_back);
  group_siblings(g, p);
  return p;
}

std::map<std::string, Tensor> Executor::run(const Plan& p, const std::map<std::string, TensorView>& feeds,
                                            const Tap& tap, std::span<const std::pair<int, TensorView>> placed) const {
  const Graph& g = *p.graph;
  buffers_.next_round();
  std::vector<Tensor> owned(g.nodes.size());
  std::vector<TensorView> value(g.nodes.size());
  std::vector<char> is_placed(g.nodes.size(), 0);
  // A Concat's output need only be dense within each outer index (op_checks.h), so a batch's
  // keys and values go into the KV cache's rows, `capacity` slots apart, and its past stays put.
  for (const auto& [id, view] : placed) {
    const auto i = static_cast<std::size_t>(id);
    if (i >= g.nodes.size()) continue;
    const bool dense = view.contiguous() || (g.nodes[i].op == OpKind::Concat && ops::rows_dense(view));
    if (dense && view.shape == g.nodes[i].shape && view.dtype == g.nodes[i].dtype) {
      value[i] = view;
      is_placed[i] = 1;
    }
  }
  std::vector<char> ready(g.nodes.size(), 0);  // weights and sibling Linears may be ready early
  const auto resolve_weight = [&](std::size_t i) {
    value[i] = p.weights[i];
    ready[i] = 1;
  };
  std::vector<TensorView> ins;  // one node's inputs, reused
  const auto inputs_of = [&](const Node& node) -> const std::vector<TensorView>& {
    ins.clear();
    for (int in : node.inputs) ins.push_back(value[static_cast<std::size_t>(in)]);
    return ins;
  };
  const auto allocate = [&](std::size_t i) {
    if (!is_placed[i]) {
      owned[i] = buffers_.take(g.nodes[i].dtype, g.nodes[i].shape);
      value[i] = owned[i].view();
    }
    ready[i] = 1;
  };

  // Profiling (set_profile): each computed node's op time, a sibling group's split by output size.
  using Clock = std::chrono::steady_clock;
  ExecProfile* const profile = profile_;
  std::vector<double> sibling_seconds(profile ? g.nodes.size() : 0, -1.0);
  if (profile) profile->count_run();
  Clock::time_point t0;
  for (std::size_t step = 0; step < p.order.size(); ++step) {
    const auto i = static_cast<std::size_t>(p.order[step]);
    const Node& node = g.nodes[i];
    if (profile) t0 = Clock::now();
    if (node.op == OpKind::Input) {
      auto it = feeds.find(node.params.ref);
      if (it == feeds.end()) runtime_error("graph input '{}' was not fed", node.params.ref);
      if (it->second.shape != node.shape || it->second.dtype != node.dtype)
        runtime_error("graph input '{}': fed {} {}, expected {} {}", node.params.ref, dtype_name(it->second.dtype),
                      it->second.shape.str(), dtype_name(node.dtype), node.shape.str());
      value[i] = it->second;
    } else if (node.op == OpKind::Weight) {
      resolve_weight(i);
    } else if (node.op == OpKind::EditHost) {
      allocate(i);
      run_host_edit(node, inputs_of(node), value[i]);
    } else if (ready[i]) {
      // computed with its siblings
    } else if (const int group = p.sibling_group[i]; group >= 0) {
      const auto& members = p.siblings[static_cast<std::size_t>(group)];
      std::vector<const Node*> nodes;
      std::vector<std::vector<TensorView>> sibling_ins;
      std::vector<TensorView> outs;
      for (int m : members) {
        const Node& sibling = g.nodes[static_cast<std::size_t>(m)];
        for (std::size_t k = 1; k < sibling.inputs.size(); ++k) resolve_weight(static_cast<std::size_t>(sibling.inputs[k]));
        allocate(static_cast<std::size_t>(m));
        nodes.push_back(&sibling);
        sibling_ins.push_back(inputs_of(sibling));
        outs.push_back(value[static_cast<std::size_t>(m)]);
      }
      p.backend[i]->run_siblings(nodes, sibling_ins, outs);
      if (profile) share_sibling_time(g, members, seconds_since(t0), sibling_seconds);
    } else {
      allocate(i);
      p.backend[i]->run(node, inputs_of(node), value[i]);
    }
    if (!profile || node.op == OpKind::Input || node.op == OpKind::Weight) {
      if (tap)
        for (const auto& name : p.taps[i]) tap(name, value[i]);
    } else {
      if (p.backend[i]) p.backend[i]->sync();  // a backend that queues work: time its finishing, not its queueing
      const double op = sibling_seconds[i] < 0 ? seconds_since(t0) : sibling_seconds[i];
      const auto t1 = Clock::now();
      if (tap)
        for (const auto& name : p.taps[i]) tap(name, value[i]);
      const int tapped = tap ? static_cast<int>(p.taps[i].size()) : 0;
      profile->add(g, node, op, tapped ? seconds_since(t1) : 0.0, tapped, sibling_seconds[i] >= 0, is_placed[i] != 0);
    }
    if (p.last_use[i] < 0) owned[i] = Tensor();  // tapped only: nobody reads it later
    // Free inputs whose last reader was this step.
    for (int in : node.inputs)
      if (p.last_use[static_cast<std::size_t>(in)] == static_cast<int>(step)) owned[static_cast<std::size_t>(in)] = Tensor();
  }
  primary_.sync();
  std::map<std::string, Tensor> out;
  for (const auto& name : p.outputs) {
    const auto id = static_cast<std::size_t>(*g.output(name));
    out[name] = owned[id].empty() ? Tensor::copy_of(value[id]) : owned[id];
  }
  return out;
}

}  // namespace sonde
