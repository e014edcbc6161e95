// A planted fault, not a test of rankmap: it prints the line that `rankmap bench -c` prints when
// every element was right ("# Out of bounds values : 0 OK"; rankmap_bench_loopback passes on
// it), then commits one fault that only a sanitizer sees. sanitizer_plant_test.py runs it as the
// CTest tests sanitizer_plant_<fault>, declared with rankmap_pass_on_output like every test that
// passes on a line of its output, and checks that CTest fails each one on its sanitizer's report.
//
// Usage: sanitizer_plant leak|use_after_free|ub|race. It runs only with RANKMAP_SANITIZER_PLANT=1
// in the environment (set by sanitizer_plant_test.py); otherwise it says so and exits 77, which
// CTest counts as skipped, so that a plain `ctest` never runs a fault on purpose.
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

constexpr int kSkipped = 77;

// Volatile, so that the compiler keeps each access the sanitizers are to see.
char* volatile gLeaked = nullptr;
int* volatile gFreed = nullptr;
volatile int gLarge = INT_MAX;
int gRacy = 0;

// LeakSanitizer, at exit: the only pointer to 4 KiB is overwritten.
void leak() {
  gLeaked = new char[4096];
  std::memset(gLeaked, 1, 4096);
  gLeaked = nullptr;
}

// AddressSanitizer: reads an int after freeing it (not an out-of-bounds read, which UBSan's
// object-size check would report first in the ASan+UBSan tree).
int useAfterFree() {
  gFreed = new int(7);
  delete gFreed;
  return *gFreed;
}

// UndefinedBehaviorSanitizer: signed integer overflow.
int ub() { return gLarge + 1; }

// ThreadSanitizer: two threads write the same int with nothing ordering them.
int race() {
  std::thread a([] { ++gRacy; });
  std::thread b([] { ++gRacy; });
  a.join();
  b.join();
  return gRacy;
}

}  // namespace

int main(int argc, char** argv) {
  const char* enabled = std::getenv("RANKMAP_SANITIZER_PLANT");
  if (enabled == nullptr || std::string(enabled) != "1") {
    std::printf(
        "skipped: a planted fault, run only by sanitizer_reports_fail_tests "
        "(RANKMAP_SANITIZER_PLANT=1)\n");
    return kSkipped;
  }
  const std::string fault = argc == 2 ? argv[1] : "";
  if (fault != "leak" && fault != "use_after_free" && fault != "ub" && fault != "race") {
    std::fprintf(stderr, "usage: sanitizer_plant leak|use_after_free|ub|race\n");
    return 2;
  }
  // Rows before the matched line, as a benchmark prints them: a report is found after more output
  // than CTest keeps of a passed test's output.
  for (int row = 0; row < 64; ++row) {
    std::printf("%12d %12d   float     sum    -1    12.34    0.01    0.01       0\n", 8 << row % 20,
                2 << row % 20);
  }
  std::printf("# Out of bounds values : 0 OK\n");
  std::fflush(stdout);
  int result = 0;
  if (fault == "leak") leak();
  if (fault == "use_after_free") result = useAfterFree();
  if (fault == "ub") result = ub();
  if (fault == "race") result = race();
  std::printf("planted %s: %d\n", fault.c_str(), result);
  return 0;
}
