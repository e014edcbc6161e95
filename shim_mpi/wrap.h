// The machinery every PMPI wrapper of librankmap_mpi.so shares (generated ones included):
// handles on the real MPI functions, the re-entry guard and the communicator substitution.
//
// Threads: the reordered world is published once, at the end of MPI_Init/MPI_Init_thread, before
// the application can call MPI from other threads, and withdrawn in MPI_Finalize; wrappers read
// it with an acquire load. The guard is per thread. Nothing here throws or allocates.
#pragma once

#include <mpi.h>

#include <atomic>

// On every exported MPI_X and PMPI_X of the shim: the shim is built with hidden visibility, and
// only Open MPI's mpi.h declares its functions with default visibility (MPICH's does not).
#define RANKMAP_SHIM_EXPORT __attribute__((visibility("default")))

namespace rankmap::shim_mpi {

// dlsym(RTLD_NEXT, name), logging once on stderr when the symbol is missing; nullptr then.
void* resolveRealSymbol(const char* name) noexcept;

// The value a wrapper returns when the real function cannot be found (it never is in practice:
// the shim links the MPI library whose functions it wraps). kReturnsComm: the function returns an
// MPI_Comm (told by the generator: in MPICH's ABI MPI_Comm is an int, like the error codes).
template <typename R, bool kReturnsComm>
R missingValue() noexcept {
  if constexpr (kReturnsComm) {
    return MPI_COMM_NULL;
  } else {
    return static_cast<R>(MPI_ERR_INTERN);
  }
}

// A real PMPI function, found on first call (constant-initialised: usable before main).
template <typename F, bool kReturnsComm>
class RealFunction;

template <typename R, typename... A, bool kReturnsComm>
class RealFunction<R (*)(A...), kReturnsComm> {
 public:
  using Fn = R (*)(A...);
  constexpr explicit RealFunction(const char* name) : name_(name) {}

  R operator()(A... args) noexcept {
    Fn f = fn_.load(std::memory_order_acquire);
    if (__builtin_expect(f == nullptr, 0)) {
      f = reinterpret_cast<Fn>(resolveRealSymbol(name_));
      if (f == nullptr) return missingValue<R, kReturnsComm>();
      fn_.store(f, std::memory_order_release);
    }
    return f(args...);
  }

 private:
  const char* name_;
  std::atomic<Fn> fn_{nullptr};
};

// Depth of wrapped calls on this thread. Only the outermost wrapper rewrites communicators: a
// wrapped function that MPI calls from inside another (Open MPI's libmpi calls a few PMPI_X
// through the PLT) sees exactly what its caller passed.
extern thread_local int tCallDepth __attribute__((tls_model("initial-exec")));

class CallGuard {
 public:
  CallGuard() noexcept : outermost_(tCallDepth++ == 0) {}
  ~CallGuard() { --tCallDepth; }
  CallGuard(const CallGuard&) = delete;
  CallGuard& operator=(const CallGuard&) = delete;
  bool outermost() const noexcept { return outermost_; }

 private:
  bool outermost_;
};

// The reordered world, or kNoComm while none is in use (identity order, before MPI_Init, after
// MPI_Finalize). kNoComm is a value-initialised handle (a null pointer in Open MPI, 0 in MPICH,
// whose handles all have high bits set), usable in constant initialisation, unlike Open MPI's
// MPI_COMM_NULL.
inline constexpr MPI_Comm kNoComm{};
extern std::atomic<MPI_Comm> gReordered;

// MPI_COMM_WORLD -> the reordered world; anything else unchanged.
inline MPI_Comm toReordered(MPI_Comm c) noexcept {
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  return (c == MPI_COMM_WORLD && w != kNoComm) ? w : c;
}

// The reordered world -> MPI_COMM_WORLD; anything else unchanged.
inline MPI_Comm toReal(MPI_Comm c) noexcept {
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  return (c == w && w != kNoComm) ? MPI_COMM_WORLD : c;
}

// True for MPI_COMM_WORLD and for the reordered world.
inline bool isWorld(MPI_Comm c) noexcept {
  MPI_Comm w = gReordered.load(std::memory_order_acquire);
  return c == MPI_COMM_WORLD || (c == w && w != kNoComm);
}

}  // namespace rankmap::shim_mpi
