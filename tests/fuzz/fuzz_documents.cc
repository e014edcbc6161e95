// Fuzz target for the shared documents: topology.json and plan.json parsers must reject any input
// with InvalidInput (never crash, hang or throw anything else), and whatever they accept must
// round-trip to the same document.
//
// Built two ways: with libFuzzer (scripts/fuzz, clang -fsanitize=fuzzer,address) for real fuzzing,
// and with replay_main.cc into a CTest test (label `fuzz`) that runs the corpus plus deterministic
// mutations of it on every `scripts/test`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/error.h"
#include "common/plan.h"
#include "common/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto t = rankmap::Topology::parse(text, "fuzz");
    if (!(rankmap::Topology::parse(t.dump(), "roundtrip") == t)) std::abort();
  } catch (const rankmap::InvalidInput&) {
  }
  try {
    auto p = rankmap::Plan::parse(text, "fuzz");
    if (!(rankmap::Plan::parse(p.dump(), "roundtrip") == p)) std::abort();
  } catch (const rankmap::InvalidInput&) {
  }
  return 0;
}
