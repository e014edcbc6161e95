#include "common/error.h"

#include <cstring>
#include <new>

namespace rankmap {

std::string_view errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidInput: return "invalid input";
    case ErrorCode::kIo: return "I/O error";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kNotSupported: return "not supported";
    case ErrorCode::kSystem: return "system error";
    case ErrorCode::kCuda: return "CUDA error";
    case ErrorCode::kPeer: return "peer error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

SystemError::SystemError(const std::string& msg, int err)
    : Error(ErrorCode::kSystem, fmt::format("{}: {} (errno {})", msg, std::strerror(err), err)),
      err_(err) {}

ErrorCode toCode(const std::exception& e) noexcept {
  if (auto* r = dynamic_cast<const Error*>(&e)) return r->code();
  if (dynamic_cast<const std::bad_alloc*>(&e)) return ErrorCode::kSystem;
  if (dynamic_cast<const std::invalid_argument*>(&e)) return ErrorCode::kInvalidInput;
  return ErrorCode::kInternal;
}

std::string describe(const std::exception& e, bool withWhere) {
  auto* r = dynamic_cast<const Error*>(&e);
  if (!withWhere || !r || r->where().empty()) return e.what();
  return fmt::format("{} (at {})", e.what(), r->where());
}

namespace detail {
std::string_view baseName(const char* file) {
  std::string_view f(file);
  auto pos = f.find_last_of('/');
  return pos == std::string_view::npos ? f : f.substr(pos + 1);
}
}  // namespace detail

}  // namespace rankmap
