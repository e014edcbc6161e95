// Shared by the agent tests: the API token their daemons are started with.
#pragma once

namespace rankmap::agent::test {

inline constexpr const char* kToken = "test-token-0123456789";

}  // namespace rankmap::agent::test
