#include "collectives/connect.h"

#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <string_view>

#include "collectives/bootstrap/root_bootstrap.h"
#include "collectives/transport/transport.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"
#include "common/net.h"

namespace rankmap::coll {
namespace {

// Every launcher variable chooseRendezvous may read.
constexpr const char* kLauncherVariables[] = {"OMPI_COMM_WORLD_RANK",
                                              "OMPI_COMM_WORLD_SIZE",
                                              "OMPI_COMM_WORLD_LOCAL_RANK",
                                              "OMPI_COMM_WORLD_LOCAL_SIZE",
                                              "PMI_RANK",
                                              "PMI_SIZE",
                                              "RANK",
                                              "WORLD_SIZE",
                                              "LOCAL_RANK",
                                              "MASTER_ADDR",
                                              "MASTER_PORT"};

const std::string* find(const LauncherEnvironment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

std::optional<int> intFrom(const LauncherEnvironment& env, const std::string& name) {
  const std::string* v = find(env, name);
  if (v == nullptr) return std::nullopt;
  int x = 0;
  auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), x);
  if (ec != std::errc() || p != v->data() + v->size())
    RANKMAP_THROW(InvalidInput, "{}={:?}: expected an integer", name, *v);
  return x;
}

// `name` (a world size) must accompany the rank variable `with`: the launcher sets both.
int requiredInt(const LauncherEnvironment& env, const std::string& name, const char* with) {
  std::optional<int> v = intFrom(env, name);
  if (!v) RANKMAP_THROW(InvalidInput, "{} is set but {} is not: expected both", with, name);
  return *v;
}

// The launcher's rank and size, in the order of the opening comment; false when none is there.
bool rankFromLauncher(const LauncherEnvironment& env, Rendezvous& r) {
  if (auto rank = intFrom(env, "OMPI_COMM_WORLD_RANK")) {
    r.rank = *rank;
    r.size = requiredInt(env, "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK");
    r.localRank = intFrom(env, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(-1);
    r.source = "Open MPI";
  } else if (auto pr = intFrom(env, "PMI_RANK")) {
    r.rank = *pr;
    r.size = requiredInt(env, "PMI_SIZE", "PMI_RANK");
    r.source = "PMI";
  } else if (auto tr = intFrom(env, "RANK")) {
    r.rank = *tr;
    r.size = requiredInt(env, "WORLD_SIZE", "RANK");
    r.localRank = intFrom(env, "LOCAL_RANK").value_or(-1);
    r.source = "torchrun";
  } else {
    return false;
  }
  return true;
}

}  // namespace

std::string Rendezvous::describe() const {
  std::string local = localRank >= 0 ? fmt::format(", local rank {}", localRank) : std::string();
  if (kind == RendezvousKind::kMpi)
    return fmt::format("rank {} of {} from Open MPI's library {}{}, root {} (MPI_Bcast)", rank,
                       size, mpiLibrary, local, root.empty() ? "not yet known" : root);
  return fmt::format("rank {} of {} from {}{}, root {} ({})", rank, size, source, local, root,
                     rootSource);
}

LauncherEnvironment launcherEnvironment() {
  LauncherEnvironment env;
  for (const char* name : kLauncherVariables)
    if (const char* v = std::getenv(name)) env[name] = v;  // launcher variables, not settings
  return env;
}

RendezvousSettings RendezvousSettings::fromConfig(const Config& config) {
  RendezvousSettings s;
  s.root = config.get(settings::kRoot);
  s.rank = config.get(settings::kRank);
  s.size = config.get(settings::kWorldSize);
  s.mpiLibrary = config.get(settings::kMpiLibrary);
  return s;
}

Rendezvous chooseRendezvous(const LauncherEnvironment& env, const RendezvousSettings& settings) {
  Rendezvous r;
  const bool explicitRank = settings.rank >= 0 || settings.size >= 0;
  if (explicitRank) {
    r.rank = static_cast<int>(std::clamp<int64_t>(settings.rank, -1, INT32_MAX));
    r.size = static_cast<int>(std::clamp<int64_t>(settings.size, -1, INT32_MAX));
    r.source = "RANKMAP_RANK";
    if (settings.root.empty())
      RANKMAP_THROW(InvalidInput,
                    "RANKMAP_ROOT is not set: give host:port where rank 0 listens (RANKMAP_RANK "
                    "and RANKMAP_WORLD_SIZE name a standalone launch, which names its root)");
  } else if (!rankFromLauncher(env, r)) {
    RANKMAP_THROW(InvalidInput,
                  "no rank: run under mpirun (Open MPI) or torchrun, or set RANKMAP_RANK, "
                  "RANKMAP_WORLD_SIZE and RANKMAP_ROOT");
  }
  if (r.size < 1 || r.size > (1 << 20))
    RANKMAP_THROW(InvalidInput, "world size {} (from {}) out of range: expected 1..{}", r.size,
                  r.source, 1 << 20);
  if (r.rank < 0 || r.rank >= r.size)
    RANKMAP_THROW(InvalidInput, "rank {} (from {}) outside a world of {}", r.rank, r.source,
                  r.size);
  if (!settings.root.empty()) {
    r.root = settings.root;
    r.rootSource = "RANKMAP_ROOT";
  } else if (r.source == "Open MPI") {
    r.kind = RendezvousKind::kMpi;
    r.mpiLibrary = settings.mpiLibrary;
    r.rootSource = "MPI_Bcast";
    r.sameHost = intFrom(env, "OMPI_COMM_WORLD_LOCAL_SIZE") == r.size;
  } else if (r.source == "PMI") {
    RANKMAP_THROW(InvalidInput,
                  "under MPICH/Hydra (PMI_RANK is set) but the rendezvous through the MPI library "
                  "handles Open MPI only: set RANKMAP_ROOT=host:port where rank 0 listens");
  } else {
    const std::string* addr = find(env, "MASTER_ADDR");
    std::optional<int> port = intFrom(env, "MASTER_PORT");
    if (addr == nullptr || !port)
      RANKMAP_THROW(InvalidInput,
                    "RANK is set (torchrun) but {} is not: expected MASTER_ADDR and MASTER_PORT "
                    "(rank 0 listens on MASTER_PORT+1), or set RANKMAP_ROOT",
                    addr == nullptr ? "MASTER_ADDR" : "MASTER_PORT");
    if (*port < 1 || *port > 65534)
      RANKMAP_THROW(InvalidInput,
                    "MASTER_PORT={}: expected 1..65534 (rank 0 listens on MASTER_PORT+1)", *port);
    r.root = hostPortText(*addr, static_cast<uint16_t>(*port + 1));
    r.rootSource = "MASTER_ADDR:MASTER_PORT+1";
  }
  return r;
}

Rendezvous rendezvousFromEnvironment(const Config& config) {
  return chooseRendezvous(launcherEnvironment(), RendezvousSettings::fromConfig(config));
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

namespace {

// Where rank 0 listens under the MPI rendezvous (the rule in connect.h's opening comment).
std::string mpiRootHost(const Rendezvous& r, const Config& config) {
  if (const std::string& ifname = config.get(settings::kSocketIfname); !ifname.empty())
    return interfaceAddress(ifname, "RANKMAP_SOCKET_IFNAME");
  if (r.sameHost) return "127.0.0.1";
  for (const InterfaceAddress& a : interfaceAddresses())
    if (a.address.rfind("127.", 0) != 0) return a.address;
  RANKMAP_THROW(InvalidInput,
                "rank 0 has no non-loopback IPv4 address for the other ranks to reach: set "
                "RANKMAP_SOCKET_IFNAME or RANKMAP_ROOT");
}

constexpr size_t kMaxRootMessage = 1024;
// The broadcast starts with one of these: rank 0's address follows, or why it has none.
constexpr char kRootOk = '+';
constexpr char kRootFailed = '!';

void logRendezvous(const Rendezvous& r) {
  if (r.rank == 0)
    RANKMAP_INFO(Coll, "rendezvous: {}", r.describe());
  else
    RANKMAP_DEBUG(Coll, "rendezvous: {}", r.describe());
}

}  // namespace

Connection connectByRendezvous(const Rendezvous& rendezvous, const Config& config,
                               CommOptions options, LocalPlan plan, Deadline deadline) {
  Connection c;
  c.rendezvous = rendezvous;
  Rendezvous& r = c.rendezvous;
  if (r.kind == RendezvousKind::kRoot) {
    logRendezvous(r);
    c.comm = connectCommunicator(r.rank, r.size, r.root, config, std::move(options),
                                 std::move(plan), deadline);
    return c;
  }
  c.mpi = bootstrap::MpiLibrary::open(r.mpiLibrary);
  // Rank 0 always broadcasts, its failure too: a rank that left the others in MPI_Bcast would
  // leave them there for good.
  std::optional<bootstrap::RootListener> listener;
  std::string message;
  if (r.rank == 0) {
    try {
      listener.emplace(hostPortText(mpiRootHost(r, config), 0));
      message = kRootOk + listener->address();
    } catch (const Error& e) {
      message = kRootFailed + std::string(e.what()).substr(0, kMaxRootMessage - 1);
    }
  }
  message = c.mpi->broadcastFromRank0(message, kMaxRootMessage);
  if (message.empty() || message[0] != kRootOk) {
    if (r.rank == 0 && !listener)
      RANKMAP_THROW(InvalidInput, "rendezvous through MPI: rank 0 cannot listen: {}",
                    message.substr(1));
    RANKMAP_THROW(PeerError, "rendezvous through MPI: rank 0 cannot listen: {}",
                  message.empty() ? std::string("(empty message)") : message.substr(1));
  }
  r.root = message.substr(1);
  if (c.mpi->rank() != r.rank || c.mpi->size() != r.size)
    RANKMAP_THROW(InvalidInput, "MPI library {}: rank {} of {}, but the launcher said {} of {}",
                  r.mpiLibrary, c.mpi->rank(), c.mpi->size(), r.rank, r.size);
  logRendezvous(r);
  std::unique_ptr<bootstrap::Bootstrap> bs =
      r.rank == 0 ? bootstrap::makeRootBootstrap(std::move(*listener), r.size, deadline)
                  : bootstrap::makeRootBootstrap(r.rank, r.size, r.root, deadline);
  c.comm = connectCommunicator(*bs, config, std::move(options), std::move(plan), deadline);
  return c;
}

Connection connectFromEnvironment(const Config& config) {
  Rendezvous r = rendezvousFromEnvironment(config);
  CommOptions options = CommOptions::fromConfig(config);
  LocalPlan plan = loadLocalPlan(config.get(settings::kPlan), r.rank, r.size, config);
  return connectByRendezvous(r, config, options, std::move(plan), Deadline::after(options.timeout));
}

}  // namespace rankmap::coll
