// ExecProfile: the executor's opt-in per-node timing (exec_profile.h).
#include <sonde/exec_profile.h>

#include <fmt/core.h>

#include <algorithm>

namespace sonde {

void ExecProfile::add(const Graph& g, const Node& node, double seconds, double tap_seconds, int tapped, bool sibling,
                      bool placed) {
  const double flops = node.op == OpKind::Linear && !node.inputs.empty()
                           ? 2.0 * static_cast<double>(node.shape.numel()) *
                                 static_cast<double>(g.nodes[static_cast<std::size_t>(node.inputs[0])].shape.last())
                           : 0.0;
  std::lock_guard<std::mutex> lock(mutex_);
  // An unnamed node (the k and v projections, say) is told apart by its place in the graph.
  const std::string name = node.names.empty() ? fmt::format("(unnamed #{})", &node - g.nodes.data()) : node.name();
  const auto [it, fresh] = index_.try_emplace({name, static_cast<int>(node.op)}, nodes_.size());
  if (fresh) {
    nodes_.emplace_back();
    nodes_.back().name = name;
    nodes_.back().op = node.op;
  }
  NodeTime& t = nodes_[it->second];
  t.shape = node.shape;
  t.best_seconds = t.runs == 0 ? seconds : std::min(t.best_seconds, seconds);
  t.runs += 1;
  t.seconds += seconds;
  t.taps += tapped;
  t.tap_seconds += tap_seconds;
  t.flops += flops;
  t.sibling = sibling;
  t.placed += placed ? 1 : 0;
}

void ExecProfile::count_run() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++runs_;
}

std::int64_t ExecProfile::runs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return runs_;
}

void ExecProfile::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  index_.clear();
  nodes_.clear();
  runs_ = 0;
}

std::vector<NodeTime> ExecProfile::nodes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return nodes_;
}

std::vector<ExecProfile::KindTime> ExecProfile::by_kind() const {
  std::map<std::string, KindTime> kinds;
  for (const auto& n : nodes()) {
    KindTime& k = kinds[std::string(op_name(n.op))];
    k.op = op_name(n.op);
    k.seconds += n.seconds;
    k.runs += n.runs;
  }
  std::vector<KindTime> out;
  for (auto& [name, k] : kinds) out.push_back(k);
  std::stable_sort(out.begin(), out.end(), [](const KindTime& a, const KindTime& b) { return a.seconds > b.seconds; });
  return out;
}

}  // namespace sonde
