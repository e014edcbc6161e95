#include "tests/unit/shim_mpi/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <sstream>

extern char** environ;

namespace rankmap::testing {

Completed runCommand(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env, Deadline deadline,
                     const std::vector<std::string>& unset) {
  Completed c;
  std::map<std::string, std::string> all;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& u : unset) all.erase(u);
  for (const auto& [k, v] : env) all[k] = v;
  std::vector<std::string> envText;
  for (const auto& [k, v] : all) envText.push_back(k + "=" + v);
  std::vector<char*> cenv, cargv;
  for (auto& s : envText) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  std::vector<std::string> args = argv;
  for (auto& s : args) cargv.push_back(s.data());
  cargv.push_back(nullptr);

  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) return c;
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    dup2(outPipe[1], 1);
    dup2(errPipe[1], 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execvpe(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(outPipe[1]);
  close(errPipe[1]);
  if (pid < 0) {
    close(outPipe[0]);
    close(errPipe[0]);
    return c;
  }
  setpgid(pid, pid);
  pollfd fds[2] = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&c.out, &c.err};
  int open = 2;
  while (open > 0) {
    int timeout = deadline.pollTimeoutMs();
    if (timeout == 0) {
      c.timedOut = true;
      kill(-pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, timeout);
    if (n < 0 && errno == EINTR) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      ssize_t r = read(fds[i].fd, buf, sizeof(buf));
      if (r > 0) {
        sinks[i]->append(buf, static_cast<size_t>(r));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) close(f.fd);
  int status = 0;
  waitpid(pid, &status, 0);
  // Whatever the job left behind in its group (orted, ranks) goes too.
  kill(-pid, SIGKILL);
  c.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return c;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

}  // namespace rankmap::testing
