#include "shim_nccl/real_nccl.h"

#include <dlfcn.h>

#include <string_view>

#include "common/error.h"
#include "common/log.h"

namespace rankmap::shim_nccl {
namespace {

// The object file (shared library or executable) that holds `addr`; null if unknown.
const void* objectBase(const void* addr) {
  Dl_info info{};
  if (dladdr(addr, &info) == 0) return nullptr;
  return info.dli_fbase;
}

const void* ourBase() {
  static const void* base = objectBase(reinterpret_cast<const void*>(&objectBase));
  return base;
}

// Looks up "pnccl<name>" then "nccl<name>" in `handle`; refuses a function of the shim itself
// (that would recurse forever).
template <typename Fn>
void lookup(void* handle, std::string_view name, Fn*& out) {
  void* sym = nullptr;
  for (const char* prefix : {"pnccl", "nccl"}) {
    std::string full = std::string(prefix) + std::string(name);
    dlerror();
    sym = dlsym(handle, full.c_str());
    if (sym != nullptr) break;
  }
  if (sym != nullptr && ourBase() != nullptr && objectBase(sym) == ourBase())
    RANKMAP_THROW(InternalError, "NCCL lookup of {} returned the shim's own function", name);
  out = reinterpret_cast<Fn*>(sym);
}

void fill(void* handle, RealNccl& r) {
  lookup(handle, "GetVersion", r.getVersion);
  lookup(handle, "GetUniqueId", r.getUniqueId);
  lookup(handle, "CommInitRank", r.commInitRank);
  lookup(handle, "CommInitRankConfig", r.commInitRankConfig);
  lookup(handle, "CommInitRankScalable", r.commInitRankScalable);
  lookup(handle, "CommInitAll", r.commInitAll);
  lookup(handle, "CommSplit", r.commSplit);
  lookup(handle, "CommShrink", r.commShrink);
  lookup(handle, "CommDestroy", r.commDestroy);
  lookup(handle, "CommAbort", r.commAbort);
  lookup(handle, "CommUserRank", r.commUserRank);
  lookup(handle, "CommCount", r.commCount);
  lookup(handle, "CommGetAsyncError", r.commGetAsyncError);
  lookup(handle, "GroupStart", r.groupStart);
  lookup(handle, "GroupEnd", r.groupEnd);
  lookup(handle, "GroupSimulateEnd", r.groupSimulateEnd);
  lookup(handle, "Reduce", r.reduce);
  lookup(handle, "Bcast", r.bcast);
  lookup(handle, "Broadcast", r.broadcast);
  lookup(handle, "AllReduce", r.allReduce);
  lookup(handle, "ReduceScatter", r.reduceScatter);
  lookup(handle, "AllGather", r.allGather);
  lookup(handle, "AlltoAll", r.alltoAll);
  lookup(handle, "Gather", r.gather);
  lookup(handle, "Scatter", r.scatter);
  lookup(handle, "Send", r.send);
  lookup(handle, "Recv", r.recv);
}

// The functions every NCCL 2.x has; without them the handle is not NCCL.
bool complete(const RealNccl& r) {
  return r.getUniqueId && r.commInitRank && r.commDestroy && r.commUserRank && r.commCount &&
         r.groupStart && r.groupEnd && r.reduce && r.broadcast && r.bcast && r.allReduce &&
         r.reduceScatter && r.allGather && r.send && r.recv && r.commGetAsyncError;
}

std::string libraryPath(void* handle, const char* fallback) {
  void* sym = dlsym(handle, "pncclGetVersion");
  if (sym == nullptr) sym = dlsym(handle, "ncclGetVersion");
  Dl_info info{};
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return fallback;
}

}  // namespace

RealNccl resolveRealNccl(void* handle, std::string source) {
  RealNccl r;
  fill(handle, r);
  if (!complete(r))
    RANKMAP_THROW(NotSupported, "{} lacks NCCL 2.x functions (is it NCCL?)", source);
  r.source = std::move(source);
  return r;
}

RealNccl resolveRealNccl() {
  for (const char* soname : {"libnccl.so.2", "libnccl.so"}) {
    void* h = dlopen(soname, RTLD_NOLOAD | RTLD_LAZY);
    if (h == nullptr) continue;
    // NOLOAD took a reference; NCCL stays loaded as long as the application holds it, and we
    // keep ours for the life of the process.
    return resolveRealNccl(h, fmt::format("{} ({})", soname, libraryPath(h, soname)));
  }
  RealNccl r;
  fill(RTLD_NEXT, r);
  if (complete(r)) {
    r.source = "RTLD_NEXT (" + libraryPath(RTLD_NEXT, "next object") + ")";
    return r;
  }
  RANKMAP_THROW(NotSupported,
                "no NCCL is loaded in this process (dlopen(libnccl.so.2, RTLD_NOLOAD) and "
                "dlsym(RTLD_NEXT, pncclGetUniqueId) both failed)");
}

}  // namespace rankmap::shim_nccl
