#!/usr/bin/python3
"""rankmapd as the tools around it see it: two real agents on loopback run one probe round, then

  promtool    `promtool check metrics` (Debian's prometheus package) finds nothing in /metrics;
  prometheus  a real Prometheus server, started here on loopback, scrapes the agent's metrics_listen
              port (GET /metrics alone, no token): the target is up and rankmap_build_info, the
              round's timestamp and the process metrics are stored;
  syscalls    every system call the agent makes (strace -f: start, a round, /metrics, SIGHUP,
              SIGTERM) is one that the unit's SystemCallFilter= lines allow, so the hardening of
              configs/rankmapd.service cannot kill it with SIGSYS;
  security    `systemd-analyze security --offline=true` rates configs/rankmapd.service at an
              exposure of at most 2.0.

Usage: rankmapd_outside_test.py RANKMAPD UNIT_FILE CHECK
A missing tool is a skip (exit 77) with the reason; every wait has a deadline.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

kMaxExposure = 2.0
kDeadlineS = 30


def skip(reason):
    print(f"SKIP: {reason}")
    sys.exit(77)


def fail(what):
    print(f"FAIL: {what}")
    sys.exit(1)


def freePort():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, method="GET", token=None, timeout=5):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()


def waitFor(what, fn, deadlineS=kDeadlineS):
    end = time.monotonic() + deadlineS
    while time.monotonic() < end:
        try:
            got = fn()
            if got:
                return got
        except OSError:
            pass
        time.sleep(0.2)
    fail(f"no {what} within {deadlineS} s")


class Agents:
    """Agents a (127.0.0.1) and b (127.0.0.2) with one hosts file, key and token; `wrapA` is a
    command prefix for a (strace), `ownerA` the uid it runs as (its files are given to it)."""

    def __init__(self, rankmapd, tmp, wrapA=(), ownerA=None, argsA=()):
        self.tmp, self.procs, self.wrapped = tmp, [], []
        self.token = "t" * 32
        for name, text in (("key", "k" * 64), ("token", self.token)):
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write(text + "\n")
            os.chmod(path, 0o600)
        probe = {"a": ("127.0.0.1", freePort()), "b": ("127.0.0.2", freePort())}
        with open(os.path.join(tmp, "hosts"), "w") as f:
            for name, (addr, port) in probe.items():
                f.write(f"{name} {addr}:{port}\n")
        if ownerA is not None:
            os.chmod(tmp, 0o755)
            for path in [tmp] + [os.path.join(tmp, f) for f in os.listdir(tmp)]:
                os.chown(path, ownerA, ownerA)
        self.port = {}
        for name, (addr, port) in probe.items():
            self.port[name] = freePort()
            cmd = [rankmapd, "--name", name, "--listen", f"127.0.0.1:{self.port[name]}",
                   "--probe-listen", f"{addr}:{port}", "--hosts", os.path.join(tmp, "hosts"),
                   "--state-dir", os.path.join(tmp, "state-" + name),
                   "--token-file", os.path.join(tmp, "token"),
                   "--key-file", os.path.join(tmp, "key")]
            log = open(os.path.join(tmp, f"{name}.log"), "w")
            wrap = list(wrapA if name == "a" else ())
            cmd += list(argsA if name == "a" else ())
            self.procs.append(subprocess.Popen(wrap + cmd, stdout=log, stderr=log))
            self.wrapped.append(bool(wrap))
        for name in probe:
            waitFor(f"health from agent {name}", lambda n=name: http(self.url(n) + "/v1/health"))

    def url(self, name="a"):
        return f"http://127.0.0.1:{self.port[name]}"

    def round(self):
        http(self.url() + "/v1/probe", "POST", self.token)
        waitFor("topology after the round",
                lambda: '"topology_version": 1' in http(self.url() + "/v1/health"))

    def pid(self, i):
        """The agent's own pid: under a wrapper (strace), the wrapper's child. Signals go to the
        agent itself, since strace detaches on SIGTERM and leaves its tracee running."""
        if not self.wrapped[i]:
            return self.procs[i].pid
        path = f"/proc/{self.procs[i].pid}/task/{self.procs[i].pid}/children"
        return int(waitFor("the wrapped agent's pid", lambda: open(path).read().split()[:1])[0])

    def signal(self, i, sig):
        if self.procs[i].poll() is None:
            os.kill(self.pid(i), sig)

    def stop(self):
        for i in range(len(self.procs)):
            try:
                self.signal(i, signal.SIGTERM)
            except (OSError, ValueError):
                self.procs[i].kill()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def log(self, name="a"):
        with open(os.path.join(self.tmp, f"{name}.log")) as f:
            return f.read()


def checkPromtool(rankmapd, tmp):
    promtool = shutil.which("promtool")
    if not promtool:
        skip("promtool not installed (Debian package prometheus; scripts/setup-deps installs it)")
    agents = Agents(rankmapd, tmp)
    try:
        agents.round()
        text = http(agents.url() + "/metrics")
    finally:
        agents.stop()
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=kDeadlineS)
    print(f"promtool check metrics: exit {r.returncode}, {len(text.splitlines())} lines checked")
    if r.returncode != 0 or r.stdout.strip() or r.stderr.strip():
        fail(f"promtool check metrics:\n{r.stdout}{r.stderr}")
    print("PASS")


def checkPrometheus(rankmapd, tmp):
    server = shutil.which("prometheus")
    if not server:
        skip("prometheus not installed (Debian package prometheus; scripts/setup-deps installs it)")
    metricsPort = freePort()
    agents = Agents(rankmapd, tmp, argsA=("--metrics-listen", f"127.0.0.1:{metricsPort}"))
    prom = None
    try:
        agents.round()
        promPort = freePort()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: rankmapd\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{metricsPort}']\n")
        promLog = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([server, f"--config.file={config}",
                                 f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                                 f"--web.listen-address=127.0.0.1:{promPort}"],
                                stdout=promLog, stderr=promLog)
        api = f"http://127.0.0.1:{promPort}/api/v1/query?query="

        def value(query):
            got = json.loads(http(api + urllib.request.quote(query)))["data"]["result"]
            return got[0]["value"][1] if got else None

        # Prometheus starts in seconds; the first scrape follows within its interval.
        waitFor("up == 1 in Prometheus", lambda: value('up{job="rankmapd"}') == "1", 60)
        for query in ("rankmap_build_info", "rankmap_last_successful_round_timestamp_seconds",
                      "process_start_time_seconds", "process_resident_memory_bytes"):
            v = waitFor(f"{query} in Prometheus", lambda q=query: value(q), 15)
            print(f"{query} = {v}")
            if query != "rankmap_build_info" and float(v) <= 0:
                fail(f"{query} is {v}, expected > 0")
    finally:
        if prom:
            prom.terminate()
            try:
                prom.wait(timeout=10)
            except subprocess.TimeoutExpired:
                prom.kill()
                prom.wait()
        agents.stop()
    print("PASS")


def syscallSets():
    """Group name -> its system calls, from systemd's own table (groups expanded)."""
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                         timeout=kDeadlineS, check=True).stdout
    groups, current = {}, None
    for line in out.splitlines():
        if line.startswith("@"):
            current = line.strip()
            groups[current] = []
        elif current and line.strip() and not line.strip().startswith("#"):
            groups[current].append(line.strip())

    def expand(item, seen=()):
        if not item.startswith("@"):
            return {item}
        if item not in groups:
            fail(f"the unit names system-call group {item}, which systemd does not know")
        return set().union(*(expand(x, seen + (item,)) for x in groups[item] if x not in seen))
    return expand


def unitFilter(unit, expand):
    """The allowed set of the unit's SystemCallFilter= lines, applied in order as systemd does:
    the first list sets an allow list (or a deny list with ~), later ones add or remove."""
    allowed = None
    with open(unit) as f:
        lines = [m.group(1) for m in re.finditer(r"^SystemCallFilter=(.*)$", f.read(), re.M)]
    if not lines:
        fail(f"{unit} has no SystemCallFilter= line")
    for value in lines:
        deny = value.startswith("~")
        names = set().union(*(expand(x) for x in value.lstrip("~").split()))
        if allowed is None:
            if deny:
                fail(f"{unit}: the first SystemCallFilter= is a deny list; expected an allow list")
            allowed = names
        elif deny:
            allowed -= names
        else:
            allowed |= names
    return allowed


def checkSyscalls(rankmapd, unit, tmp):
    strace = shutil.which("strace")
    if not strace or not shutil.which("systemd-analyze"):
        skip("strace or systemd-analyze not installed")
    allowed = unitFilter(unit, syscallSets())
    trace = os.path.join(tmp, "strace.out")
    wrap = (strace, "-f", "-qq", "-o", trace)
    if os.geteuid() == 0:
        # The unit runs rankmapd as its own user, and libraries act on that (SQLite chowns its
        # journal only as root): trace it as an unprivileged user too.
        wrap = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups") + wrap
    agents = Agents(rankmapd, tmp, wrapA=wrap, ownerA=65534 if os.geteuid() == 0 else None)
    try:
        agents.round()
        http(agents.url() + "/metrics")
        http(agents.url() + "/v1/topology")
        http(agents.url() + "/v1/ready")
        agents.signal(0, signal.SIGHUP)
        waitFor("the reload", lambda: "reloaded hosts file" in agents.log())
    finally:
        agents.stop()
    used = set()
    with open(trace) as f:
        for line in f:
            m = re.match(r"^\d+\s+(?:<\.\.\. )?([a-z0-9_]+)[( ]", line)
            if m and m.group(1) not in ("exit", "resumed"):
                used.add(m.group(1))
    if len(used) < 20:
        fail(f"strace saw only {sorted(used)}: the trace did not cover the agent")
    # execve is the call that starts the program under the filter; systemd installs it before.
    refused = sorted(used - allowed - {"execve"})
    print(f"{len(used)} system calls used, {len(allowed)} allowed by the unit's filter")
    if refused:
        fail(f"system calls the unit's SystemCallFilter= would refuse: {refused}")
    print("PASS")


def checkSecurity(unit):
    if not shutil.which("systemd-analyze"):
        skip("systemd-analyze not installed")
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", unit],
                       capture_output=True, text=True, timeout=kDeadlineS)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    if not m:
        fail(f"no exposure level in systemd-analyze's output:\n{r.stdout}{r.stderr}")
    exposure = float(m.group(1))
    print(f"systemd-analyze security --offline=true: exposure {exposure} (at most {kMaxExposure})")
    for line in r.stdout.splitlines():
        if line.startswith("✗"):
            print("  " + " ".join(line.split()))
    if exposure > kMaxExposure:
        fail(f"exposure {exposure} > {kMaxExposure}")
    print("PASS")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    rankmapd, unit, check = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="rankmapd-outside-") as tmp:
        if check == "promtool":
            checkPromtool(rankmapd, tmp)
        elif check == "prometheus":
            checkPrometheus(rankmapd, tmp)
        elif check == "syscalls":
            checkSyscalls(rankmapd, unit, tmp)
        elif check == "security":
            checkSecurity(unit)
        else:
            print(f"unknown check {check!r}: expected promtool, prometheus, syscalls or security")
            sys.exit(2)


if __name__ == "__main__":
    main()
