#include "plan_cache.h"

namespace sonde {

PlannedGraph& PlanCache::get(const PlanKey& key, const std::set<std::string>& taps, const Make& make) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->key == key && it->taps == taps) {
      entries_.splice(entries_.begin(), entries_, it);
      return *entries_.front().graph;
    }
  auto made = make();
  ++made_;
  if (entries_.size() >= kEntries) entries_.pop_back();
  entries_.push_front(Entry{key, taps, std::move(made)});
  return *entries_.front().graph;
}

}  // namespace sonde
