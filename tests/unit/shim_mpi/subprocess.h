// Test helper: runs a command with extra environment variables, captures stdout and stderr, and
// kills its whole process group when the deadline passes (so an MPI job that hangs fails the
// test instead of hanging the suite). Used by the shim_mpi and launch tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "tests/unit/common/temp_dir.h"

namespace rankmap::testing {

struct Completed {
  int status = -1;      // exit code, 128 + signal when killed, -1 when it could not start
  bool timedOut = false;
  std::string out;
  std::string err;
};

// Runs argv (PATH lookup) in its own process group with `env` added to (or replacing in) this
// process's environment; `unset` names variables to remove. Never throws for the child's failures.
Completed runCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env, Deadline deadline,
                     const std::vector<std::string>& unset = {});

// Lines of `text` (without the newlines).
std::vector<std::string> lines(const std::string& text);

}  // namespace rankmap::testing
