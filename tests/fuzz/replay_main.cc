// Runs LLVMFuzzerTestOneInput over every file in the corpus directories given on the command line,
// then over deterministic mutations of them (byte flips, truncations, splices). Exit 0 = no crash.
// On a crash (a signal, or a sanitizer's report where one is linked) the input that caused it is
// written to ./replay-crash-input and named on stderr, for adding to the corpus once fixed.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <csignal>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
// Present when a sanitizer runtime is linked.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

const std::string* current = nullptr;  // the input being run, for the crash handler
constexpr char kCrashFile[] = "replay-crash-input";

// Async-signal-safe: open, write, close only.
void saveCurrent() {
  static volatile sig_atomic_t saved = 0;
  if (!current || saved) return;
  saved = 1;
  int fd = ::open(kCrashFile, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  for (size_t done = 0; done < current->size();) {
    ssize_t n = ::write(fd, current->data() + done, current->size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  constexpr char kMsg[] = "replay: the crashing input is in ./replay-crash-input\n";
  [[maybe_unused]] ssize_t w = ::write(2, kMsg, sizeof kMsg - 1);
}

void onSignal(int sig) {
  saveCurrent();
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void run(const std::string& s) {
  current = &s;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  current = nullptr;
}

}  // namespace

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
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, onSignal);
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(saveCurrent);
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
