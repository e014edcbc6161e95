// Hashes and message authentication on OpenSSL (plan hashes, probe HMAC).
#pragma once

#include <string>
#include <string_view>

namespace rankmap {

// Lower-case hex SHA-256 of `data`.
std::string sha256Hex(std::string_view data);
// Raw 32-byte HMAC-SHA256 of `data` under `key`.
std::string hmacSha256(std::string_view key, std::string_view data);
// Constant-time comparison of two equal-length byte strings (false if lengths differ).
bool constantTimeEqual(std::string_view a, std::string_view b);
std::string toHex(std::string_view bytes);

}  // namespace rankmap
