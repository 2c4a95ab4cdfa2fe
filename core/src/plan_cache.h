#pragma once
// The graphs and plans of a session's recent forward calls. A decode step's graph differs from the
// step before only in the shapes of the inputs that grow with the past (the cached keys and values,
// the mask), so it is keyed by everything else, and a hit re-infers shapes for the new past length
// instead of building and planning again (0.5-1.3% of a qwen2.5-0.5b decode step, measured).
#include <sonde/executor.h>
#include <sonde/graph.h>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace sonde {

struct PlanKey {
  bool fills_kv = false;  // forward_cached: this call's K/V hooks are tapped into the cache
  std::int64_t batch = 0, tokens = 0;
  bool has_mask = false, need_logits = false, has_past = false;
  std::int64_t logits_from = 0, logits_to = 0;  // BatchShape's
  bool operator==(const PlanKey&) const = default;
};

struct PlannedGraph {
  Graph graph;
  Plan plan;                 // plan.graph points at `graph`
  std::int64_t past = 0;     // the past length the shapes are inferred for; -1 after a failure
  struct KvConcat {
    int node;                // Concat(past_k.{layer} or past_v.{layer}, this call's keys or values)
    std::size_t layer;
    bool is_v;
  };
  std::vector<KvConcat> kv_concats;  // written straight into the KV cache when it allows
};

class PlanCache {
 public:
  static constexpr std::size_t kEntries = 8;  // a batch run alternates prefill and decode shapes
  using Make = std::function<std::unique_ptr<PlannedGraph>()>;

  // The entry for `key` and these tapped hooks, made when absent (the least recently used goes
  // when the cache is full). The taps are copied only then: a capture may tap hundreds.
  PlannedGraph& get(const PlanKey& key, const std::set<std::string>& taps, const Make& make);
  std::int64_t made() const { return made_; }
  void clear() { entries_.clear(); }  // the graphs change (edits): plan again

 private:
  struct Entry {
    PlanKey key;
    std::set<std::string> taps;
    std::unique_ptr<PlannedGraph> graph;
  };
  std::list<Entry> entries_;  // most recent first
  std::int64_t made_ = 0;
};

}  // namespace sonde
