#include "common/maxmin.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "common/error.h"

namespace rankmap {

void MaxMinFiller::fill(std::span<const double> room, const FlowLinks& flows,
                        std::span<const double> cap, std::vector<double>& rate) {
  const size_t F = flows.flows();
  const size_t L = room.size();
  RANKMAP_ASSERT(cap.empty() || cap.size() == F);
  rate.assign(F, 0);
  room_.assign(room.begin(), room.end());
  key_.assign(L, 0);
  users_.assign(L, 0);
  for (size_t f = 0; f < F; ++f)
    for (uint32_t l : flows.of(f)) {
      RANKMAP_ASSERT(l < L);
      ++users_[l];
    }
  // Flows of each link (reverse index), to freeze them when the link saturates.
  flowsOfBegin_.assign(L + 1, 0);
  for (size_t l = 0; l < L; ++l) flowsOfBegin_[l + 1] = flowsOfBegin_[l] + users_[l];
  flowsOf_.resize(flowsOfBegin_[L]);
  fillAt_.assign(flowsOfBegin_.begin(), flowsOfBegin_.end() - 1);
  for (size_t f = 0; f < F; ++f)
    for (uint32_t l : flows.of(f)) flowsOf_[fillAt_[l]++] = static_cast<uint32_t>(f);

  using Entry = std::pair<double, int64_t>;  // level; link l >= 0, or flow cap ~f
  heap_.clear();
  for (size_t l = 0; l < L; ++l) {
    if (users_[l] == 0 || !std::isfinite(room_[l])) continue;
    room_[l] = std::max(room_[l], 0.0);
    key_[l] = room_[l] / users_[l];
    heap_.push_back({key_[l], static_cast<int64_t>(l)});
  }
  if (!cap.empty())
    for (size_t f = 0; f < F; ++f)
      if (std::isfinite(cap[f])) heap_.push_back({cap[f], ~static_cast<int64_t>(f)});
  std::greater<Entry> later;
  std::make_heap(heap_.begin(), heap_.end(), later);

  frozen_.assign(F, 0);
  size_t open = F;
  double level = 0;
  auto freeze = [&](size_t f) {
    frozen_[f] = 1;
    rate[f] = level;
    --open;
    for (uint32_t l : flows.of(f)) {
      if (!std::isfinite(room_[l])) continue;
      room_[l] = std::max(room_[l] - level, 0.0);
      if (--users_[l] > 0) {
        key_[l] = room_[l] / users_[l];
        heap_.push_back({key_[l], static_cast<int64_t>(l)});
        std::push_heap(heap_.begin(), heap_.end(), later);
      }
    }
  };
  while (open > 0 && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    auto [lv, id] = heap_.back();
    heap_.pop_back();
    if (id < 0) {
      auto f = static_cast<size_t>(~id);
      if (frozen_[f]) continue;
      level = std::max(level, lv);
      freeze(f);
      continue;
    }
    auto l = static_cast<size_t>(id);
    if (users_[l] == 0 || lv != key_[l]) continue;  // stale: the link's level has moved
    level = std::max(level, lv);
    for (uint32_t i = flowsOfBegin_[l]; i < flowsOfBegin_[l + 1]; ++i)
      if (!frozen_[flowsOf_[i]]) freeze(flowsOf_[i]);
  }
  for (size_t f = 0; f < F; ++f)
    if (!frozen_[f]) rate[f] = kUnlimitedRate;
}

std::vector<double> maxMinFill(std::span<const double> room, const FlowLinks& flows,
                               std::span<const double> cap) {
  thread_local MaxMinFiller filler;
  std::vector<double> rate;
  filler.fill(room, flows, cap, rate);
  return rate;
}

}  // namespace rankmap
