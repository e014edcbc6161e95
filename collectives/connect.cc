#include "collectives/connect.h"

#include <charconv>
#include <cstdlib>
#include <unistd.h>
#include <string_view>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/transport.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

namespace rankmap::coll {
namespace {

std::optional<int> intFromEnv(const char* name) {
  const char* v = std::getenv(name);  // launcher variables, not RANKMAP_* settings
  if (v == nullptr || *v == '\0') return std::nullopt;
  std::string_view s(v);
  int x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || p != s.data() + s.size())
    RANKMAP_THROW(InvalidInput, "{}={:?}: expected an integer", name, std::string(s));
  return x;
}

}  // namespace

LaunchInfo launchInfoFromEnvironment(const Config& config) {
  LaunchInfo info;
  info.root = config.get(settings::kRoot);
  const int64_t rank = config.get(settings::kRank), size = config.get(settings::kWorldSize);
  if (rank >= 0 || size >= 0) {
    info.rank = static_cast<int>(rank);
    info.size = static_cast<int>(size);
    info.source = "RANKMAP_RANK";
  } else if (auto r = intFromEnv("OMPI_COMM_WORLD_RANK")) {
    info.rank = *r;
    info.size = intFromEnv("OMPI_COMM_WORLD_SIZE").value_or(-1);
    info.source = "Open MPI";
  } else if (auto pr = intFromEnv("PMI_RANK")) {
    info.rank = *pr;
    info.size = intFromEnv("PMI_SIZE").value_or(-1);
    info.source = "PMI";
  } else {
    RANKMAP_THROW(InvalidInput,
                  "no rank: set RANKMAP_RANK, RANKMAP_WORLD_SIZE and RANKMAP_ROOT, or run under "
                  "mpirun with RANKMAP_ROOT");
  }
  if (info.size < 1 || info.size > (1 << 20))
    RANKMAP_THROW(InvalidInput, "world size {} (from {}) out of range", info.size, info.source);
  if (info.rank < 0 || info.rank >= info.size)
    RANKMAP_THROW(InvalidInput, "rank {} (from {}) outside a world of {}", info.rank, info.source,
                  info.size);
  if (info.root.empty())
    RANKMAP_THROW(InvalidInput, "RANKMAP_ROOT is not set: give host:port where rank 0 listens");
  return info;
}

namespace {

PlanChecks checksFrom(const Config& config) {
  PlanChecks c;
  c.maxAge = config.get(settings::kPlanMaxAge);
  return c;
}

std::string thisHost() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string();
  return shortHostName(buf);
}

}  // namespace

LocalPlan loadLocalPlan(const std::string& path, int rank, int size, const Config& config) {
  LocalPlan l;
  l.vote = localPlanVote(path, rank, size, checksFrom(config), l.plan);
  l.vote.host = thisHost();
  return l;
}

LocalPlan localPlanFrom(std::optional<Plan> plan, int rank, int size, const Config& config) {
  LocalPlan l;
  l.vote = planVote(plan, rank, size, checksFrom(config));
  l.vote.host = thisHost();
  if (l.vote.status == PlanStatus::kOk) l.plan = std::move(plan);
  return l;
}

PlanDecision agreePlan(bootstrap::Bootstrap& bootstrap, LocalPlan mine, Deadline deadline) {
  const int rank = bootstrap.rank();
  mine.vote.rank = rank;
  mine.vote.worldSize = bootstrap.size();
  std::vector<std::string> blobs = bootstrap.allgather(mine.vote.encode(), deadline);
  std::vector<PlanVote> votes;
  votes.reserve(blobs.size());
  bool offered = false;
  for (size_t r = 0; r < blobs.size(); ++r) {
    PlanVote v = PlanVote::decode(blobs[r], fmt::format("engine bootstrap, rank {}", r));
    offered = offered || v.status != PlanStatus::kNone;
    votes.push_back(std::move(v));
  }
  PlanVerdict verdict = judgePlan(votes, mine.plan ? &*mine.plan : nullptr);
  PlanDecision d;
  if (verdict.apply) {
    if (rank == 0) RANKMAP_INFO(Coll, "engine: ranks agree on {}", verdict.reason);
    d.plan = std::move(mine.plan);
  } else if (offered) {
    d.refused = verdict.reason;
    if (rank == 0)
      RANKMAP_WARN(Coll, "engine: identity order on every rank: {}", verdict.reason);
    else
      RANKMAP_DEBUG(Coll, "rank {}: identity order: {}", rank, verdict.reason);
  }
  return d;
}

std::unique_ptr<Communicator> connectCommunicator(bootstrap::Bootstrap& bootstrap,
                                                  const Config& config, CommOptions options,
                                                  LocalPlan plan, Deadline deadline) {
  auto device = transport::makeDevice(transport::deviceOptionsFromConfig(config));
  PlanDecision agreed = agreePlan(bootstrap, std::move(plan), deadline);
  auto ctx = device->connect(bootstrap, deadline);
  return std::make_unique<Communicator>(std::move(device), std::move(ctx), std::move(options),
                                        std::move(agreed));
}

std::unique_ptr<Communicator> connectCommunicator(int rank, int size, const std::string& root,
                                                  const Config& config, CommOptions options,
                                                  LocalPlan plan, Deadline deadline) {
  auto bootstrap = bootstrap::makeRootBootstrap(rank, size, root, deadline);
  return connectCommunicator(*bootstrap, config, std::move(options), std::move(plan), deadline);
}

std::unique_ptr<Communicator> connectFromEnvironment(const Config& config) {
  LaunchInfo info = launchInfoFromEnvironment(config);
  CommOptions options = CommOptions::fromConfig(config);
  LocalPlan plan = loadLocalPlan(config.get(settings::kPlan), info.rank, info.size, config);
  return connectCommunicator(info.rank, info.size, info.root, config, options, std::move(plan),
                             Deadline::after(options.timeout));
}

}  // namespace rankmap::coll
