// Error hierarchy shared by every rankmap module.
//
// Contract: inside rankmap, failures are exceptions derived from rankmap::Error, each carrying an
// ErrorCode. At C ABI borders (shims, coll.h) exceptions are caught and turned into codes with
// toCode(); nothing escapes into a host process. Messages name the object they are about.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace rankmap {

// Stable numeric values: they cross the C ABI (rankmapResult_t mirrors them).
enum class ErrorCode : int {
  kOk = 0,
  kInvalidInput = 1,   // bad file, document, argument, environment variable
  kIo = 2,             // file or socket I/O failed
  kTimeout = 3,        // a Deadline expired
  kNotSupported = 4,   // an algorithm/backend declines; callers fall back
  kSystem = 5,         // a system call failed (errno attached)
  kCuda = 6,           // a CUDA runtime/driver call failed
  kPeer = 7,           // a remote peer failed, disconnected or disagreed
  kInternal = 8,       // a bug in rankmap
};

std::string_view errorCodeName(ErrorCode code);

// what() is for users: their words, no source location. where() is the "file.cc:123" that threw
// (RANKMAP_THROW, RANKMAP_CHECK_SYS; empty otherwise), shown at debug level (describe()).
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  ErrorCode code() const noexcept { return code_; }
  const std::string& where() const noexcept { return where_; }
  void setWhere(std::string where) { where_ = std::move(where); }

 private:
  ErrorCode code_;
  std::string where_;
};

class InvalidInput : public Error {
 public:
  explicit InvalidInput(const std::string& msg) : Error(ErrorCode::kInvalidInput, msg) {}
};
class IoError : public Error {
 public:
  explicit IoError(const std::string& msg) : Error(ErrorCode::kIo, msg) {}
};
class TimeoutError : public Error {
 public:
  explicit TimeoutError(const std::string& msg) : Error(ErrorCode::kTimeout, msg) {}
};
class NotSupported : public Error {
 public:
  explicit NotSupported(const std::string& msg) : Error(ErrorCode::kNotSupported, msg) {}
};
class SystemError : public Error {
 public:
  SystemError(const std::string& msg, int err);
  int err() const noexcept { return err_; }

 private:
  int err_;
};
class CudaError : public Error {
 public:
  explicit CudaError(const std::string& msg) : Error(ErrorCode::kCuda, msg) {}
};
class PeerError : public Error {
 public:
  explicit PeerError(const std::string& msg) : Error(ErrorCode::kPeer, msg) {}
};
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& msg) : Error(ErrorCode::kInternal, msg) {}
};

// Maps any exception (rankmap or std) to a code; for `catch (...)` guards at ABI borders.
ErrorCode toCode(const std::exception& e) noexcept;

// The message of `e`, with its source location after it when `withWhere` (debug level).
std::string describe(const std::exception& e, bool withWhere);

namespace detail {
std::string_view baseName(const char* file);
// `e` with where() set to file:line.
template <typename E>
E located(E e, const char* file, int line) {
  e.setWhere(fmt::format("{}:{}", baseName(file), line));
  return e;
}
}  // namespace detail

}  // namespace rankmap

// Throws Type with the message, and where() "file.cc:123". Type must be one of the classes
// above except SystemError (use RANKMAP_CHECK_SYS).
#define RANKMAP_THROW(Type, ...) \
  throw ::rankmap::detail::located(Type(fmt::format(__VA_ARGS__)), __FILE__, __LINE__)

// Throws InvalidInput unless a == b, printing both: "expected 8 ranks vs plan for 6".
#define RANKMAP_ENFORCE_EQ(a, b, what)                                                \
  do {                                                                                \
    const auto& rankmap_a_ = (a);                                                     \
    const auto& rankmap_b_ = (b);                                                     \
    if (!(rankmap_a_ == rankmap_b_)) {                                                \
      RANKMAP_THROW(::rankmap::InvalidInput, "{}: {} vs {}", (what), rankmap_a_,      \
                    rankmap_b_);                                                      \
    }                                                                                 \
  } while (0)

// Throws InternalError when a rankmap invariant is broken (never for user errors); the message
// keeps the location, for the bug report.
#define RANKMAP_ASSERT(cond)                                                         \
  do {                                                                               \
    if (!(cond))                                                                     \
      RANKMAP_THROW(::rankmap::InternalError, "assertion failed: {} ({}:{})", #cond, \
                    ::rankmap::detail::baseName(__FILE__), __LINE__);                \
  } while (0)

// For system calls returning -1 on error: throws SystemError naming the call and errno.
#define RANKMAP_CHECK_SYS(call)                                                               \
  ([&]() {                                                                                    \
    auto rankmap_rv_ = (call);                                                                \
    if (rankmap_rv_ == -1) {                                                                  \
      int rankmap_err_ = errno;                                                               \
      throw ::rankmap::detail::located(::rankmap::SystemError(#call, rankmap_err_), __FILE__, \
                                       __LINE__);                                             \
    }                                                                                         \
    return rankmap_rv_;                                                                       \
  }())
