#include "common/plan_agreement.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include <fmt/format.h>

#include "common/error.h"

namespace rankmap {
namespace {

// Wire layout, little-endian: version u8, rank i32, worldSize i32, status u8, checkHosts u8,
// hash/reason/host lengths u16 each, then the three strings.
constexpr uint8_t kVoteVersion = 1;
constexpr size_t kHeaderBytes = 1 + 4 + 4 + 1 + 1 + 2 + 2 + 2;
constexpr size_t kMaxHash = 128;
constexpr size_t kMaxReason = 2048;
constexpr size_t kMaxHost = 255;
static_assert(kHeaderBytes + kMaxHash + kMaxReason + kMaxHost <= PlanVote::kMaxEncodedBytes);

void putU(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t getU(std::string_view in, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[at + static_cast<size_t>(i)])) << (8 * i);
  return v;
}

// "0-3,5,7" for a sorted list of ranks, at most six items.
std::string rankList(const std::vector<int>& ranks) {
  std::string out;
  int items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (++items > 6) {
      out += ",...";
      break;
    }
    if (!out.empty()) out += ',';
    out += j > i ? fmt::format("{}-{}", ranks[i], ranks[j]) : std::to_string(ranks[i]);
    i = j + 1;
  }
  return out;
}

PlanVerdict identity(std::string why) { return {false, std::move(why)}; }

std::string ageText(std::chrono::milliseconds ms) {
  using namespace std::chrono;
  if (ms >= hours(48)) return fmt::format("{:.1f} days", duration<double, std::ratio<86400>>(ms).count());
  if (ms >= minutes(120)) return fmt::format("{:.1f} h", duration<double, std::ratio<3600>>(ms).count());
  return fmt::format("{:.0f} s", duration<double>(ms).count());
}

}  // namespace

std::string shortPlanHash(std::string_view hash) {
  return std::string(hash.substr(0, std::min<size_t>(hash.size(), 19)));
}

std::string shortHostName(std::string_view host) {
  return std::string(host.substr(0, host.find('.')));
}

std::string PlanVote::encode() const {
  const std::string h = hash.substr(0, kMaxHash);
  const std::string r = reason.substr(0, kMaxReason);
  const std::string n = host.substr(0, kMaxHost);
  std::string out;
  out.reserve(kHeaderBytes + h.size() + r.size() + n.size());
  putU(out, kVoteVersion, 1);
  putU(out, static_cast<uint32_t>(rank), 4);
  putU(out, static_cast<uint32_t>(worldSize), 4);
  putU(out, static_cast<uint8_t>(status), 1);
  putU(out, checkHosts ? 1 : 0, 1);
  putU(out, h.size(), 2);
  putU(out, r.size(), 2);
  putU(out, n.size(), 2);
  out += h;
  out += r;
  out += n;
  return out;
}

PlanVote PlanVote::decode(std::string_view in, std::string_view source) {
  auto fail = [&](std::string_view field, std::string_view expected) -> PlanVote {
    RANKMAP_THROW(InvalidInput, "{}: plan vote field {}: expected {}", source, field, expected);
  };
  if (in.size() < kHeaderBytes)
    return fail("length", fmt::format("at least {} bytes, got {}", kHeaderBytes, in.size()));
  if (getU(in, 0, 1) != kVoteVersion)
    return fail("version", fmt::format("{}, got {}", kVoteVersion, getU(in, 0, 1)));
  PlanVote v;
  v.rank = static_cast<int32_t>(getU(in, 1, 4));
  v.worldSize = static_cast<int32_t>(getU(in, 5, 4));
  const uint64_t status = getU(in, 9, 1);
  if (status > static_cast<uint64_t>(PlanStatus::kStale))
    return fail("status", fmt::format("0..3, got {}", status));
  v.status = static_cast<PlanStatus>(status);
  const uint64_t check = getU(in, 10, 1);
  if (check > 1) return fail("check_hosts", fmt::format("0 or 1, got {}", check));
  v.checkHosts = check == 1;
  const size_t hl = getU(in, 11, 2), rl = getU(in, 13, 2), nl = getU(in, 15, 2);
  if (hl > kMaxHash) return fail("hash length", fmt::format("at most {}, got {}", kMaxHash, hl));
  if (rl > kMaxReason)
    return fail("reason length", fmt::format("at most {}, got {}", kMaxReason, rl));
  if (nl > kMaxHost) return fail("host length", fmt::format("at most {}, got {}", kMaxHost, nl));
  if (in.size() != kHeaderBytes + hl + rl + nl)
    return fail("length", fmt::format("{} bytes, got {}", kHeaderBytes + hl + rl + nl, in.size()));
  v.hash = std::string(in.substr(kHeaderBytes, hl));
  v.reason = std::string(in.substr(kHeaderBytes + hl, rl));
  v.host = std::string(in.substr(kHeaderBytes + hl + rl, nl));
  return v;
}

std::optional<std::chrono::milliseconds> planAge(const Plan& plan,
                                                 std::chrono::system_clock::time_point now) {
  if (plan.topologyTime.empty()) return std::nullopt;
  auto t = parseUtcTime(plan.topologyTime);
  if (!t) return std::nullopt;  // Plan's parser refuses such plans; a hand-built one has no age
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - *t);
}

std::optional<std::string> staleReason(const Plan& plan, const PlanChecks& checks) {
  if (checks.maxAge.count() <= 0) return std::nullopt;
  auto age = planAge(plan, checks.now);
  if (!age || *age <= checks.maxAge) return std::nullopt;
  return fmt::format("plan {} is stale: its topology was measured {} ago ({}), "
                     "RANKMAP_PLAN_MAX_AGE allows {}",
                     shortPlanHash(plan.hash), ageText(*age), plan.topologyTime,
                     ageText(checks.maxAge));
}

PlanVote planVote(const std::optional<Plan>& plan, int rank, int worldSize,
                  const PlanChecks& checks) {
  PlanVote v;
  v.rank = rank;
  v.worldSize = worldSize;
  if (!plan) {
    v.status = PlanStatus::kNone;
    v.reason = "no plan";
    return v;
  }
  if (plan->worldSize() != static_cast<size_t>(worldSize)) {
    v.status = PlanStatus::kInvalid;
    v.reason = fmt::format("plan {} is for {} ranks, the job has {}", shortPlanHash(plan->hash),
                           plan->worldSize(), worldSize);
    return v;
  }
  if (auto why = staleReason(*plan, checks)) {
    v.status = PlanStatus::kStale;
    v.reason = *why;
    return v;
  }
  v.status = PlanStatus::kOk;
  v.hash = plan->hash;
  return v;
}

PlanVote localPlanVote(const std::string& path, int rank, int worldSize, const PlanChecks& checks,
                       std::optional<Plan>& plan) {
  plan.reset();
  if (path.empty()) {
    PlanVote v = planVote(std::nullopt, rank, worldSize, checks);
    v.reason = "RANKMAP_PLAN is not set";
    return v;
  }
  std::optional<Plan> loaded;
  try {
    loaded = Plan::load(path);
  } catch (const std::exception& e) {
    PlanVote v = planVote(std::nullopt, rank, worldSize, checks);
    v.status = PlanStatus::kInvalid;
    v.reason = e.what();
    return v;
  }
  PlanVote v = planVote(loaded, rank, worldSize, checks);
  if (v.status == PlanStatus::kInvalid)
    v.reason = fmt::format("plan {} is for {} ranks, the job has {}", path, loaded->worldSize(),
                           worldSize);
  if (v.status == PlanStatus::kOk) plan = std::move(loaded);
  return v;
}

std::optional<PlanVerdict> checkPlanVote(const PlanVote& first, const std::set<int>& seen,
                                         const PlanVote& v, std::string_view expectHash) {
  const int n = first.worldSize;
  if (v.worldSize != n)
    return identity(fmt::format("rank {} says {} ranks, rank {} says {}", v.rank, v.worldSize,
                                first.rank, n));
  if (v.rank < 0 || v.rank >= n)
    return identity(fmt::format("rank {} is outside 0..{}", v.rank, n - 1));
  if (seen.count(v.rank) != 0) return identity(fmt::format("rank {} voted twice", v.rank));
  if (v.status != PlanStatus::kOk)
    return identity(fmt::format("rank(s) {} have no usable plan ({})", v.rank, v.reason));
  const std::string_view expect = expectHash.empty() ? std::string_view(first.hash) : expectHash;
  if (v.hash != expect)
    return identity(fmt::format("ranks disagree on the plan: rank {} holds plan {} but {} holds {}",
                                v.rank, v.hash,
                                expectHash.empty() ? fmt::format("rank {}", first.rank)
                                                   : std::string("the agreement's creator"),
                                expect));
  return std::nullopt;
}

PlanVerdict judgePlan(const std::vector<PlanVote>& unordered, const Plan* plan) {
  if (unordered.empty()) return identity("no ranks");
  const int n = static_cast<int>(unordered.size());
  std::vector<PlanVote> votes = unordered;
  std::sort(votes.begin(), votes.end(),
            [](const PlanVote& a, const PlanVote& b) { return a.rank < b.rank; });
  for (int r = 0; r < n; ++r) {
    const PlanVote& v = votes[static_cast<size_t>(r)];
    if (v.worldSize != n)
      return identity(fmt::format("rank {} says {} ranks, {} ranks voted", v.rank, v.worldSize, n));
    if (v.rank != r)
      return identity(v.rank < 0 || v.rank >= n
                          ? fmt::format("rank {} is outside 0..{}", v.rank, n - 1)
                          : fmt::format("rank {} voted twice", v.rank));
  }
  std::vector<int> without;
  for (const auto& v : votes)
    if (v.status != PlanStatus::kOk) without.push_back(v.rank);
  if (!without.empty()) {
    const PlanVote& v = votes[static_cast<size_t>(without[0])];
    std::string who = static_cast<int>(without.size()) == n
                          ? std::string("no rank has a usable plan")
                          : fmt::format("rank(s) {} have no usable plan", rankList(without));
    return identity(fmt::format("{} (rank {}: {})", who, without[0], v.reason));
  }
  std::map<std::string, std::vector<int>> byHash;
  for (const auto& v : votes) byHash[v.hash].push_back(v.rank);
  if (byHash.size() > 1) {
    std::string parts;
    for (const auto& [h, ranks] : byHash)
      parts += fmt::format("{}{} on rank(s) {}", parts.empty() ? "" : "; ", shortPlanHash(h),
                           rankList(ranks));
    return identity("ranks disagree on the plan: " + parts);
  }
  const std::string& agreed = votes[0].hash;
  if (plan == nullptr) return {true, fmt::format("all {} ranks hold plan {}", n, agreed)};
  if (plan->hash != agreed)
    return identity("internal error: this rank's plan does not match the agreed hash");
  if (plan->worldSize() != static_cast<size_t>(n))
    return identity(fmt::format("plan {} is for {} ranks, the job has {}", shortPlanHash(agreed),
                                plan->worldSize(), n));
  // A plan for another launch order would reorder the wrong ranks: where every rank reported a
  // hostname that is a plan host (and asked for the check), old rank r must run on
  // hosts[r / ranksPerHost].
  const bool check = std::all_of(votes.begin(), votes.end(),
                                 [](const PlanVote& v) { return v.checkHosts; });
  std::map<std::string, std::string> planHosts;
  for (const auto& h : plan->hosts) planHosts[shortHostName(h)] = h;
  const bool allKnown = std::all_of(votes.begin(), votes.end(), [&](const PlanVote& v) {
    return !v.host.empty() && planHosts.count(v.host) > 0;
  });
  const bool checked = check && allKnown;
  if (checked) {
    for (const auto& v : votes) {
      const std::string& expect =
          plan->hosts[static_cast<size_t>(v.rank) / static_cast<size_t>(plan->ranksPerHost)];
      if (shortHostName(expect) != v.host)
        return identity(fmt::format("plan {} expects rank {} on {}, the launcher put it on {} "
                                    "(a plan for another launch order)",
                                    shortPlanHash(agreed), v.rank, expect, v.host));
    }
  }
  std::string pred = plan->predicted.speedup > 0 && !plan->predicted.basis.empty()
                         ? fmt::format("predicted {:.2f}x for {}", plan->predicted.speedup,
                                       plan->predicted.basis)
                         : std::string("no prediction in the plan");
  return {true, fmt::format("plan {} ({} ranks, {} per host; {}; hosts {})", shortPlanHash(agreed),
                            n, plan->ranksPerHost, pred,
                            checked ? "checked" : "not checked (hostnames are not plan hosts)")};
}

}  // namespace rankmap
