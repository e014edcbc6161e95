// Shared helpers for the probe tests: two distinct keys and a loopback endpoint.
#pragma once

#include <cstdint>
#include <string>

#include "probe/wire.h"

namespace rankmap::probe::test {

inline ProbeKey keyA() { return ProbeKey::fromBytes(std::string(32, 'a')); }
inline ProbeKey keyB() { return ProbeKey::fromBytes(std::string(32, 'b')); }
inline Endpoint loopback(uint16_t port) { return Endpoint{"127.0.0.1", port}; }

}  // namespace rankmap::probe::test
