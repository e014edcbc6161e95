#include "tests/unit/collectives/schedule_sim.h"

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

namespace rankmap::coll::testing {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::runtime_error(msg); }

struct RankState {
  const Schedule* s = nullptr;
  std::vector<Sym> buf[kNumBuffers];
  std::vector<int> sendLock[kNumBuffers];  // in-flight sends reading an element
  std::vector<bool> recvLock[kNumBuffers];  // an in-flight receive writes the element
  std::optional<ReadySteps> ready;  // the executors' own dispatch order
  std::set<uint32_t> inFlight;
  std::vector<bool> matched;
  size_t done = 0;
};

struct Sim {
  const SimSetup& setup;
  std::vector<RankState> ranks;
  // (from, to, msg) -> step index at the sender / receiver, for posted, unmatched messages.
  std::map<std::tuple<int, int, uint32_t>, uint32_t> postedSends, postedRecvs;
  uint64_t reductions = 0, messages = 0, bytes = 0;
  uint64_t fullMask = 0;

  explicit Sim(const SimSetup& s) : setup(s) {
    fullMask = s.worldSize >= 64 ? ~0ull : ((1ull << s.worldSize) - 1);
  }

  size_t es() const { return setup.elementSize; }

  std::pair<uint64_t, uint64_t> elems(int r, const Region& reg, size_t step) {
    if (reg.offset % es() != 0 || reg.bytes % es() != 0)
      fail(fmt::format("rank {}: {} not element-aligned", r, ranks[r].s->describe(step)));
    return {reg.offset / es(), reg.bytes / es()};
  }

  // Local access checks: a local step may not touch what a transfer owns.
  void checkLocal(int r, const Region& reg, bool write, size_t step) {
    auto [off, n] = elems(r, reg, step);
    auto b = static_cast<int>(reg.buffer);
    auto& st = ranks[r];
    for (uint64_t i = off; i < off + n; ++i) {
      if (st.recvLock[b][i])
        fail(fmt::format("rank {}: {} touches element {} while a receive writes it", r,
                         st.s->describe(step), i));
      if (write && st.sendLock[b][i])
        fail(fmt::format("rank {}: {} writes element {} while a send reads it", r,
                         st.s->describe(step), i));
    }
  }

  void lock(int r, const Region& reg, bool recv, int delta, size_t step) {
    auto [off, n] = elems(r, reg, step);
    auto b = static_cast<int>(reg.buffer);
    auto& st = ranks[r];
    for (uint64_t i = off; i < off + n; ++i) {
      if (recv) {
        if (delta > 0 && (st.recvLock[b][i] || st.sendLock[b][i]))
          fail(fmt::format("rank {}: {} receives into element {} that another transfer owns", r,
                           st.s->describe(step), i));
        st.recvLock[b][i] = delta > 0;
      } else {
        if (delta > 0 && st.recvLock[b][i])
          fail(fmt::format("rank {}: {} sends element {} that a receive is writing", r,
                           st.s->describe(step), i));
        st.sendLock[b][i] += delta;
      }
    }
  }

  Sym* at(int r, const Region& reg, size_t step) {
    auto [off, n] = elems(r, reg, step);
    (void)n;
    return ranks[r].buf[static_cast<int>(reg.buffer)].data() + off;
  }

  void complete(int r, uint32_t i) {
    auto& st = ranks[r];
    ++st.done;
    st.ready->complete(i);
  }

  void combine(int r, const Step& step, size_t i) {
    uint64_t n = step.dst.bytes / es();
    Sym* d = at(r, step.dst, i);
    const Sym* a = at(r, step.src, i);
    const Sym* b = at(r, step.tmp, i);
    for (uint64_t k = 0; k < n; ++k) {
      if (!a[k].valid || !b[k].valid)
        fail(fmt::format("rank {}: {} combines an unwritten element {}", r,
                         ranks[r].s->describe(i), k));
      if (a[k].index != b[k].index)
        fail(fmt::format("rank {}: {} combines element {} with element {}", r,
                         ranks[r].s->describe(i), a[k].index, b[k].index));
      if (a[k].mask & b[k].mask)
        fail(fmt::format("rank {}: {} adds contributions {:#x} twice", r, ranks[r].s->describe(i),
                         a[k].mask & b[k].mask));
      if (a[k].finalized || b[k].finalized)
        fail(fmt::format("rank {}: {} combines a finalized value", r, ranks[r].s->describe(i)));
      d[k] = Sym{a[k].mask | b[k].mask, a[k].index, false, true};
    }
    reductions += n;
  }

  void start(int r, uint32_t i) {
    auto& st = ranks[r];
    const Step& step = st.s->steps[i];
    switch (step.kind) {
      case StepKind::kSend: {
        lock(r, step.src, false, +1, i);
        const Sym* src = at(r, step.src, i);
        for (uint64_t k = 0; k < step.src.bytes / es(); ++k)
          if (!src[k].valid)
            fail(fmt::format("rank {}: {} sends unwritten element {}", r, st.s->describe(i), k));
        postedSends[{r, step.peer, step.msg}] = i;
        st.inFlight.insert(i);
        tryMatch(r, step.peer, step.msg);
        return;
      }
      case StepKind::kRecv:
      case StepKind::kRecvReduce: {
        const Region& land = step.kind == StepKind::kRecv ? step.dst : step.tmp;
        lock(r, land, true, +1, i);
        postedRecvs[{step.peer, r, step.msg}] = i;
        st.inFlight.insert(i);
        tryMatch(step.peer, r, step.msg);
        return;
      }
      case StepKind::kCopy: {
        checkLocal(r, step.src, false, i);
        checkLocal(r, step.dst, true, i);
        uint64_t n = step.dst.bytes / es();
        std::vector<Sym> tmp(at(r, step.src, i), at(r, step.src, i) + n);
        for (const auto& v : tmp)
          if (!v.valid) fail(fmt::format("rank {}: {} copies an unwritten element", r, st.s->describe(i)));
        std::copy(tmp.begin(), tmp.end(), at(r, step.dst, i));
        break;
      }
      case StepKind::kFinalize: {
        checkLocal(r, step.dst, true, i);
        Sym* d = at(r, step.dst, i);
        for (uint64_t k = 0; k < step.dst.bytes / es(); ++k) {
          if (!d[k].valid || d[k].mask != fullMask || d[k].finalized)
            fail(fmt::format("rank {}: {} finalizes element with mask {:#x}{}", r,
                             st.s->describe(i), d[k].mask, d[k].finalized ? " twice" : ""));
          d[k].finalized = true;
        }
        break;
      }
      case StepKind::kNop:
        break;
    }
    complete(r, i);
  }

  void tryMatch(int from, int to, uint32_t msg) {
    auto sIt = postedSends.find({from, to, msg});
    auto rIt = postedRecvs.find({from, to, msg});
    if (sIt == postedSends.end() || rIt == postedRecvs.end()) return;
    const Step& snd = ranks[from].s->steps[sIt->second];
    const Step& rcv = ranks[to].s->steps[rIt->second];
    const Region& land = rcv.kind == StepKind::kRecv ? rcv.dst : rcv.tmp;
    if (snd.src.bytes != land.bytes)
      fail(fmt::format("message {} from rank {} to {}: {} sends {} bytes, {} expects {}", msg, from,
                       to, ranks[from].s->describe(sIt->second), snd.src.bytes,
                       ranks[to].s->describe(rIt->second), land.bytes));
    const Sym* src = at(from, snd.src, sIt->second);
    std::copy(src, src + snd.src.bytes / es(), at(to, land, rIt->second));
    ranks[from].matched[sIt->second] = true;
    ranks[to].matched[rIt->second] = true;
    ++messages;
    bytes += snd.src.bytes;
    postedSends.erase(sIt);
    postedRecvs.erase(rIt);
  }

  // Runs rank r until it blocks; returns whether it did anything.
  bool turn(int r) {
    auto& st = ranks[r];
    bool progressed = false;
    while (true) {
      while (!st.ready->empty()) {
        uint32_t i = st.ready->pop();
        start(r, i);
        progressed = true;
      }
      if (st.inFlight.empty()) return progressed;
      uint32_t i = *st.inFlight.begin();
      if (!st.matched[i]) return progressed;
      const Step& step = st.s->steps[i];
      st.inFlight.erase(st.inFlight.begin());
      if (step.kind == StepKind::kSend) {
        lock(r, step.src, false, -1, i);
      } else {
        const Region& land = step.kind == StepKind::kRecv ? step.dst : step.tmp;
        lock(r, land, true, -1, i);
        if (step.kind == StepKind::kRecvReduce) {
          checkLocal(r, step.src, false, i);
          checkLocal(r, step.dst, true, i);
          combine(r, step, i);
        }
      }
      complete(r, i);
      progressed = true;
    }
  }
};

}  // namespace

SimOutcome simulate(const SimSetup& setup, const std::vector<Schedule>& schedules) {
  Sim sim(setup);
  const int n = setup.worldSize;
  if (static_cast<int>(schedules.size()) != n) fail("one schedule per rank expected");
  const uint64_t c = setup.count;
  sim.ranks.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto& st = sim.ranks[static_cast<size_t>(r)];
    const Schedule& s = schedules[static_cast<size_t>(r)];
    validateSchedule(s);
    if (s.rank != r || s.worldSize != n) fail("schedule for the wrong rank");
    st.s = &s;
    for (int b = 0; b < kNumBuffers; ++b) {
      if (s.bufferBytes[b] % setup.elementSize != 0) fail("buffer not whole elements");
      size_t e = s.bufferBytes[b] / setup.elementSize;
      st.buf[b].assign(e, Sym{});
      st.sendLock[b].assign(e, 0);
      st.recvLock[b].assign(e, false);
    }
    auto& in = st.buf[static_cast<int>(BufferId::kInput)];
    auto& out = st.buf[static_cast<int>(BufferId::kOutput)];
    const bool hasInput = !(setup.collective == Collective::kBroadcast && r != setup.root);
    if (hasInput)
      for (uint64_t i = 0; i < in.size(); ++i) in[i] = Sym{1ull << r, i, false, true};
    // In place, the caller's data starts in the output (the schedule names only one buffer).
    if (setup.inPlace) {
      switch (setup.collective) {
        case Collective::kAllreduce:
        case Collective::kReduce:
          for (uint64_t i = 0; i < out.size(); ++i) out[i] = Sym{1ull << r, i, false, true};
          break;
        case Collective::kBroadcast:
          if (r == setup.root)
            for (uint64_t i = 0; i < out.size(); ++i) out[i] = Sym{1ull << r, i, false, true};
          break;
        case Collective::kAllgather:
          for (uint64_t i = 0; i < c; ++i) out[r * c + i] = Sym{1ull << r, i, false, true};
          break;
        default:
          break;  // reducescatter: the output lives in the input
      }
    }
    st.ready.emplace(s);
    st.matched.assign(s.steps.size(), false);
  }
  bool progressed = true;
  while (progressed) {
    progressed = false;
    for (int r = 0; r < n; ++r) progressed |= sim.turn(r);
  }
  for (int r = 0; r < n; ++r) {
    auto& st = sim.ranks[static_cast<size_t>(r)];
    if (st.done != st.s->steps.size()) {
      std::string where = st.inFlight.empty() ? "nothing in flight"
                                              : "blocked on " + st.s->describe(*st.inFlight.begin());
      fail(fmt::format("deadlock: rank {} finished {} of {} steps, {}", r, st.done,
                       st.s->steps.size(), where));
    }
  }
  if (!sim.postedSends.empty() || !sim.postedRecvs.empty()) fail("unmatched messages left");
  SimOutcome out;
  for (auto& st : sim.ranks) {
    out.input.push_back(std::move(st.buf[static_cast<int>(BufferId::kInput)]));
    out.output.push_back(std::move(st.buf[static_cast<int>(BufferId::kOutput)]));
  }
  out.reductions = sim.reductions;
  out.messages = sim.messages;
  out.bytes = sim.bytes;
  return out;
}

std::string checkOutcome(const SimSetup& setup, const SimOutcome& o) {
  const int n = setup.worldSize;
  const uint64_t c = setup.count;
  const uint64_t full = n >= 64 ? ~0ull : ((1ull << n) - 1);
  auto expect = [&](int r, const char* buf, uint64_t i, const Sym& got, const Sym& want) -> std::string {
    if (got == want) return "";
    return fmt::format("rank {} {}[{}]: got mask {:#x} index {} final {} valid {}, want mask {:#x} "
                       "index {} final {}",
                       r, buf, i, got.mask, got.index, got.finalized, got.valid, want.mask,
                       want.index, want.finalized);
  };
  uint64_t wantReductions = 0;
  for (int r = 0; r < n; ++r) {
    const auto& in = o.input[static_cast<size_t>(r)];
    const auto& out = o.output[static_cast<size_t>(r)];
    // Inputs stay untouched unless the output lives inside them.
    const bool rsInPlace = setup.inPlace && setup.collective == Collective::kReduceScatter;
    if (!setup.inPlace) {
      const bool hasInput = !(setup.collective == Collective::kBroadcast && r != setup.root);
      for (uint64_t i = 0; i < in.size() && hasInput; ++i)
        if (auto e = expect(r, "in", i, in[i], Sym{1ull << r, i, false, true}); !e.empty()) return e;
    }
    switch (setup.collective) {
      case Collective::kAllreduce:
        for (uint64_t i = 0; i < c; ++i)
          if (auto e = expect(r, "out", i, out[i], Sym{full, i, true, true}); !e.empty()) return e;
        break;
      case Collective::kReduceScatter: {
        const auto& res = rsInPlace ? in : out;
        uint64_t base = rsInPlace ? static_cast<uint64_t>(r) * c : 0;
        for (uint64_t i = 0; i < c; ++i)
          if (auto e = expect(r, rsInPlace ? "in" : "out", base + i, res[base + i],
                              Sym{full, static_cast<uint64_t>(r) * c + i, true, true});
              !e.empty())
            return e;
        break;
      }
      case Collective::kAllgather:
        for (int j = 0; j < n; ++j)
          for (uint64_t i = 0; i < c; ++i)
            if (auto e = expect(r, "out", j * c + i, out[j * c + i], Sym{1ull << j, i, false, true});
                !e.empty())
              return e;
        break;
      case Collective::kBroadcast:
        for (uint64_t i = 0; i < c; ++i)
          if (auto e = expect(r, "out", i, out[i], Sym{1ull << setup.root, i, false, true}); !e.empty())
            return e;
        break;
      case Collective::kReduce:
        if (r == setup.root)
          for (uint64_t i = 0; i < c; ++i)
            if (auto e = expect(r, "out", i, out[i], Sym{full, i, true, true}); !e.empty()) return e;
        break;
      case Collective::kBarrier:
        break;
    }
  }
  switch (setup.collective) {
    case Collective::kAllreduce:
    case Collective::kReduce:
      wantReductions = c * static_cast<uint64_t>(n - 1);
      break;
    case Collective::kReduceScatter:
      wantReductions = c * static_cast<uint64_t>(n) * static_cast<uint64_t>(n - 1);
      break;
    default:
      break;
  }
  if (o.reductions != wantReductions)
    return fmt::format("{} element combinations, want exactly {}", o.reductions, wantReductions);
  return "";
}

}  // namespace rankmap::coll::testing
