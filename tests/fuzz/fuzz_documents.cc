// Fuzz target for the shared documents: topology.json, plan.json, profile.json (a job's
// recorded groups, common/job_profile.h) and a torchrun job's profile records (every rank's
// record, merged: JobProfile::fromRecords) parsers must reject any input with InvalidInput (never
// crash, hang or throw anything else), and whatever they accept must round-trip to the same
// document. A topology with a link model must also answer pathMbps and
// pathLatencyUs for its pairs without throwing (the parser guarantees the links fit).
//
// Built two ways: with libFuzzer (scripts/fuzz, clang -fsanitize=fuzzer,address) for real fuzzing,
// and with replay_main.cc into a CTest test (label `fuzz`) that runs the corpus plus deterministic
// mutations of it on every `scripts/test`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "common/error.h"
#include "common/job_profile.h"
#include "common/plan.h"
#include "common/topology.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<rankmap::Topology> topology;
  try {
    topology = rankmap::Topology::parse(text, "fuzz");
    if (!(rankmap::Topology::parse(topology->dump(), "roundtrip") == *topology)) std::abort();
  } catch (const rankmap::InvalidInput&) {
    topology.reset();
  }
  // Outside the try: any exception here escapes and is a finding.
  if (topology && topology->links) {
    int n = static_cast<int>(topology->size());
    for (int a = 0; a < n && a < 16; ++a)
      for (int b = 0; b < n && b < 16; ++b) {
        auto bw = topology->pathMbps(a, b);
        auto lat = topology->pathLatencyUs(a, b);
        if ((a == b) != !bw || (a == b) != !lat || (bw && !(*bw >= 0))) std::abort();
      }
  }
  try {
    auto prof = rankmap::JobProfile::parse(text, "fuzz");
    if (!(rankmap::JobProfile::parse(prof.dump(), "roundtrip") == prof)) std::abort();
  } catch (const rankmap::InvalidInput&) {
  }
  try {
    auto prof = rankmap::JobProfile::fromRecords(text, "fuzz", "2026-12-06T00:00:00Z");
    if (!(rankmap::JobProfile::parse(prof.dump(), "roundtrip") == prof)) std::abort();
  } catch (const rankmap::InvalidInput&) {
  }
  try {
    auto p = rankmap::Plan::parse(text, "fuzz");
    if (!(rankmap::Plan::parse(p.dump(), "roundtrip") == p)) std::abort();
  } catch (const rankmap::InvalidInput&) {
  }
  return 0;
}
