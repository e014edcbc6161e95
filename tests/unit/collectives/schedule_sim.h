// A network-free simulator of the schedules of all ranks of one collective, for exhaustive
// tests of the algorithm generators.
//
// Model: every element holds a symbolic value (which ranks' contributions it sums, which input
// element it is, whether it was finalized). Messages are rendezvous (a send completes only when
// its receive is posted, the worst case for deadlocks), and each rank follows the executor's
// policy pessimistically: it posts what is ready and otherwise learns only of the completion of
// its lowest-numbered step in flight. The simulator fails on: deadlock, a message whose length
// or sequence does not match, a region touched while a transfer owns it (missing dependency),
// reading an element never written, combining two values that share a contribution or differ
// in element, finalizing an incomplete or already finalized value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/schedule/schedule.h"
#include "collectives/types.h"

namespace rankmap::coll::testing {

struct Sym {
  uint64_t mask = 0;   // contributing ranks (bit r = rank r)
  uint64_t index = 0;  // element index within a contributor's input
  bool finalized = false;
  bool valid = false;
  bool operator==(const Sym&) const = default;
};

struct SimOutcome {
  // Final buffers of every rank, in elements.
  std::vector<std::vector<Sym>> input, output;
  uint64_t reductions = 0;  // element-wise combinations, all ranks together
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

struct SimSetup {
  Collective collective = Collective::kAllreduce;
  int worldSize = 1;
  uint64_t count = 0;  // as in AlgoParams
  size_t elementSize = 4;
  int root = 0;
  bool inPlace = false;
};

// Runs the schedules (index = rank). Throws std::runtime_error with a description on any
// violation listed above.
SimOutcome simulate(const SimSetup& setup, const std::vector<Schedule>& schedules);

// Checks the outcome against the collective's definition: every element of every result holds
// exactly the contributions it should (all ranks, once each), in the right place, finalized
// exactly once for reductions; inputs untouched unless in place; exactly count * (n - 1)
// combinations per reduced vector (nothing reduced twice). Returns "" or the first mismatch.
std::string checkOutcome(const SimSetup& setup, const SimOutcome& outcome);

}  // namespace rankmap::coll::testing
