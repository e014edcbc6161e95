// File helpers shared by modules that persist state.
#pragma once

#include <string>
#include <string_view>

namespace rankmap {

// Writes `content` to `path` atomically: a temporary file in the same directory, fsync, rename,
// fsync of the directory. Readers see the old file or the new one, never a torn one.
// Throws IoError naming the path.
void writeFileAtomic(const std::string& path, std::string_view content, int mode = 0644);

// Reads a whole file; throws IoError naming the path. Refuses files larger than maxBytes.
std::string readFile(const std::string& path, size_t maxBytes = 1ull << 30);

}  // namespace rankmap
