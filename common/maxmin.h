// The one max-min fair sharing model: rates of flows that share links, as TCP flows share a
// network, by progressive filling. The probe's contention inference, the planner's cost model
// and its fluid simulation of a collective all call it.
//
// Progressive filling raises every flow's rate together; a link whose room is used up freezes
// the flows crossing it at the level reached, and so does a flow's own cap. The result is the
// exact max-min fair allocation. Implementation: a heap of the levels at which each link (its
// room over its unfrozen flows) and each cap would stop the filling, O((F + L) log(F + L)) for
// F flows on L links, touching only the links that flows cross.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace rankmap {

inline constexpr double kUnlimitedRate = std::numeric_limits<double>::infinity();

// The links each flow crosses, flattened: flow f crosses links[begin[f]] .. links[begin[f+1]-1],
// each link at most once.
class FlowLinks {
 public:
  void clear() {
    begin_.assign(1, 0);
    links_.clear();
  }
  // Appends one link to the flow being built; endFlow() closes it.
  void push(uint32_t link) { links_.push_back(link); }
  void endFlow() { begin_.push_back(static_cast<uint32_t>(links_.size())); }
  size_t flows() const { return begin_.size() - 1; }
  std::span<const uint32_t> of(size_t f) const {
    return {links_.data() + begin_[f], begin_[f + 1] - begin_[f]};
  }

 private:
  std::vector<uint32_t> begin_{0};
  std::vector<uint32_t> links_;
};

// Reusable scratch for maxMinFill (the probe's fit calls it millions of times). One thread uses
// a MaxMinFiller at a time.
class MaxMinFiller {
 public:
  // Rates of `flows` on links with `room` (what is left of each link's capacity;
  // kUnlimitedRate = no limit), each flow f also limited by cap[f] when `cap` is not empty
  // (kUnlimitedRate = no cap). A flow limited by nothing gets kUnlimitedRate. `rate` is resized
  // to flows.flows().
  void fill(std::span<const double> room, const FlowLinks& flows, std::span<const double> cap,
            std::vector<double>& rate);

 private:
  std::vector<double> room_, key_;
  std::vector<uint32_t> users_, flowsOfBegin_, flowsOf_, fillAt_;
  std::vector<char> frozen_;
  std::vector<std::pair<double, int64_t>> heap_;
};

// fill() with a scratch of this thread's.
std::vector<double> maxMinFill(std::span<const double> room, const FlowLinks& flows,
                               std::span<const double> cap = {});

}  // namespace rankmap
