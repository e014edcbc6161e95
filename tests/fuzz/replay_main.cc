// Runs LLVMFuzzerTestOneInput over every file in the corpus directories given on the command line,
// then over deterministic mutations of them (byte flips, truncations, splices). Exit 0 = no crash.
#include <dirent.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void run(const std::string& s) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  int mutations = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::stoi(arg.substr(12));
      continue;
    }
    DIR* d = opendir(arg.c_str());
    if (!d) {
      std::fprintf(stderr, "replay: cannot open corpus directory %s\n", arg.c_str());
      return 2;
    }
    while (auto* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream in(arg + "/" + e->d_name, std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      inputs.push_back(ss.str());
    }
    closedir(d);
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: empty corpus\n");
    return 2;
  }
  for (const auto& s : inputs) run(s);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (int i = 0; i < mutations; ++i) {
    std::string s = inputs[next() % inputs.size()];
    switch (next() % 4) {
      case 0:  // flip bytes
        for (int k = 0, n = 1 + static_cast<int>(next() % 4); k < n && !s.empty(); ++k)
          s[next() % s.size()] = static_cast<char>(next());
        break;
      case 1:  // truncate
        s.resize(s.empty() ? 0 : next() % s.size());
        break;
      case 2: {  // splice two inputs
        const auto& o = inputs[next() % inputs.size()];
        s = s.substr(0, s.empty() ? 0 : next() % s.size()) + o.substr(o.empty() ? 0 : next() % o.size());
        break;
      }
      default: {  // replace a number-like byte with a hostile token
        static const char* kTokens[] = {"-1", "1e999", "null", "\"x\"", "[]", "{}", "9223372036854775808", "0.5"};
        if (s.empty()) break;
        size_t pos = next() % s.size();
        s.replace(pos, 1, kTokens[next() % 8]);
      }
    }
    run(s);
  }
  std::printf("replay: %zu corpus inputs and %d mutations, no crash\n", inputs.size(), mutations);
  return 0;
}
