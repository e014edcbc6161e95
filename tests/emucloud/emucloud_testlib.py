"""Shared helpers for the emucloud tests (Python 3 standard library only).

Every test:
  - skips with exit code 77 (CTest SKIP_RETURN_CODE) when not root, when a tool is
    missing, or when network namespaces cannot be made;
  - uses its own --prefix and runs `emucloud down` for it before starting (a previous run
    killed by a CTest timeout leaves nothing for the next) and when it ends, also on
    failure or SIGTERM.
"""

import argparse
import collections
import json
import os
import re
import shlex
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

kSkip = 77


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(kSkip)


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print(f"ok: {msg}", flush=True)


def figure(name, value, limit, unit="x", lower_is_better=False):
    """A measured figure against its floor (or ceiling, lower_is_better). Prints `figure NAME
    VALUE` before the check, so a failing run still reports what it measured;
    tests/emucloud/floors_bench.py collects these lines into the distributions that set the
    limits (docs/reliability.md, "Floors")."""
    print(f"figure {name} {value:.4g}", flush=True)
    if lower_is_better:
        check(value <= limit, f"{name} {value:.3g}{unit} (at most {limit:g}{unit})")
    else:
        check(value >= limit, f"{name} {value:.3g}{unit} (at least {limit:g}{unit})")


def allreduce_seconds(out, nbytes):
    """mpi_proof's median time of one allreduce of nbytes (its `time allreduce ... median_s=`
    line in `out`), or None when it printed none."""
    m = re.search(rf"time allreduce bytes={nbytes} iters=\d+ median_s=([0-9.]+)", out)
    return float(m.group(1)) if m else None


def parse_args(extra=None):
    p = argparse.ArgumentParser()
    p.add_argument("--emucloud", required=True, help="path to the emucloud script")
    if extra:
        extra(p)
    return p.parse_args()


def rates(text):
    """`R` or `R1,R2,...` (Mbit/s) as a list of floats, as `emucloud up` takes them: host rates
    cycled over the VMs, uplink rates over the racks."""
    try:
        return [float(x) for x in str(text).split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rates in Mbit/s such as 250 or 500,125,250, "
                                         f"got {text!r}")


def fmt_rates(rs):
    return ",".join(f"{r:g}" for r in rs)


def add_testbed_args(p, vms=8, racks=2, seed=1, host_mbit="1000", uplink_mbit="250"):
    """--vms --racks --seed --host-mbit --uplink-mbit, for scripts that bring up a testbed. The
    rates are lists (rates(): one value, or one per VM / per rack, cycled)."""
    p.add_argument("--vms", type=int, default=vms)
    p.add_argument("--racks", type=int, default=racks)
    p.add_argument("--seed", type=int, default=seed)
    p.add_argument("--host-mbit", type=rates, default=rates(host_mbit))
    p.add_argument("--uplink-mbit", type=rates, default=rates(uplink_mbit))
    p.add_argument("--rack-sizes", help="VMs per rack, e.g. 6,4,2 (emucloud up --rack-sizes)")


def up_args(args, seed=None):
    """`emucloud up` arguments from add_testbed_args's options (seed overrides --seed)."""
    sizes = ["--rack-sizes", args.rack_sizes] if getattr(args, "rack_sizes", None) else []
    return sizes + ["--vms", str(args.vms), "--racks", str(args.racks), "--host-mbit",
            fmt_rates(args.host_mbit), "--uplink-mbit", fmt_rates(args.uplink_mbit), "--seed",
            str(args.seed if seed is None else seed)]


# The emulated cloud's calibration of the planner's cost model (docs/planner.md, "Calibration on
# the emulated cloud"): the VMs share two CPUs, which move at most kFabricMbit through all links
# together once a step's flows have moved kFabricBurstKib together (shorter steps run faster:
# Open MPI's models take the burst per step), and every message step costs kStepOverheadUs of
# scheduling on top of the latency. Fitted on a quiet machine to Open MPI's forced algorithms on
# both testbeds of docs/performance.md (before the burst: 3000 Mbit/s and 25 us, which priced
# Rabenseifner's in-rack exchanges at 64-256 KiB 1.4-2x too slow).
kFabricMbit = 2000
kFabricBurstKib = 512
kStepOverheadUs = 0


def stand_in_mpirun(tmp, rankmap, plan_path, options="", launcher="mpirun"):
    """Writes TMP/bin/LAUNCHER, which runs `rankmap run --plan PLAN OPTIONS -- /usr/bin/LAUNCHER
    ...` (OPTIONS: shell words, quoted by the caller; LAUNCHER mpirun, or mpiexec.hydra for
    MPICH), so that a command run with TMP/bin first on PATH goes through rankmap run unchanged.
    Returns TMP/bin."""
    bindir = os.path.join(tmp, "bin")
    os.makedirs(bindir, exist_ok=True)
    wrapper = os.path.join(bindir, launcher)
    with open(wrapper, "w") as f:
        f.write(f"#!/bin/sh\nexec {shlex.quote(rankmap)} run --plan {shlex.quote(plan_path)} "
                f"{options + ' ' if options else ''}-- /usr/bin/{launcher} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    return bindir


def plan_calibration():
    """`rankmap plan` arguments that model the emulated cloud (see kFabricMbit)."""
    return ["--fabric-mbit", f"{kFabricMbit:g}", "--fabric-burst-kib", f"{kFabricBurstKib:g}",
            "--step-overhead-us", f"{kStepOverheadUs:g}"]


def require_environment(tools=("ip", "tc", "ethtool", "unshare")):
    """Skips unless root, the tools exist, and a network namespace can be made."""
    if os.geteuid() != 0:
        skip(f"needs root (running as uid {os.geteuid()})")
    for t in tools:
        if shutil.which(t) is None:
            skip(f"{t} not found")
    probe = f"emuprobe{os.getpid()}"
    p = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if p.returncode != 0:
        skip(f"cannot create a network namespace: {p.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def netns_names():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.strip())


def link_names():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split(":")[1].strip() for line in out.splitlines() if line.strip())


def snapshot():
    return {"netns": netns_names(), "links": link_names()}


class ForeignLoad:
    """CPU time used while a test runs by processes that are not the test's: not its
    descendants, not in a network namespace of their own (the emulated VMs' processes are), not
    kernel threads (the emulated links' shaping runs there). Sampled from /proc once a second,
    so a process that lives less than that between two samples is missed. Other load on the
    machine is the one proven cause of an emulated-cloud failure that is the testbed's and not
    rankmap's: the 2-core machine's shaped TCP slows with it (docs/reliability.md, "In CI")."""

    kPeriod = 1.0
    # At least this share of one core, on average over the test, and kMinCpuS in all.
    kBusyShare = 0.1
    kMinCpuS = 2.0

    def __init__(self):
        self.root = os.getpid()
        self.hz = os.sysconf("SC_CLK_TCK")
        self.netns = self._netns(self.root)
        self.started = self._stat(self.root)[3]  # ticks since boot
        self.base = {}  # (pid, starttime) -> CPU ticks at the last sample
        self.used = collections.Counter()  # command name -> ticks
        self.t0 = time.monotonic()
        self.done = threading.Event()
        self._sample()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _stat(pid):
        """(ppid, CPU ticks, command name, start ticks) of a process, or None when it is gone."""
        try:
            with open(f"/proc/{pid}/stat") as f:
                text = f.read()
        except OSError:
            return None
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        return int(fields[1]), int(fields[11]) + int(fields[12]), name, int(fields[19])

    @staticmethod
    def _netns(pid):
        try:
            return os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            return None

    def _sample(self):
        procs = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = self._stat(int(entry))
                if st:
                    procs[int(entry)] = st

        def ours(pid):
            for _ in range(64):
                if pid == self.root:
                    return True
                if pid not in procs or pid <= 2:
                    return False
                pid = procs[pid][0]
            return False

        for pid, (ppid, ticks, name, start) in procs.items():
            if pid == 2 or ppid == 2 or ours(pid):
                continue
            key = (pid, start)
            if key not in self.base:
                # A process that started after the test counts from its start.
                self.base[key] = 0 if start >= self.started else ticks
                if start >= self.started and self._netns(pid) != self.netns:
                    self.base[key] = None  # a VM's process: the testbed's own
            if self.base[key] is None:
                continue
            self.used[name] += max(0, ticks - self.base[key])
            self.base[key] = ticks

    def _run(self):
        while not self.done.wait(self.kPeriod):
            self._sample()

    def stop(self):
        """The 'testbed: ...' line when other processes kept the machine busy, else None."""
        self.done.set()
        self.thread.join(timeout=5)
        self._sample()
        wall = time.monotonic() - self.t0
        cpu = sum(self.used.values()) / self.hz
        if wall <= 0 or cpu < self.kMinCpuS or cpu < self.kBusyShare * wall:
            return None
        top = ", ".join(f"{n} {t / self.hz:.1f} s" for n, t in self.used.most_common(3))
        return (f"testbed: other processes used {cpu:.1f} CPU-s in the {wall:.0f} s of this test "
                f"({cpu / wall:.2f} of a core of {os.cpu_count()}; most: {top}): the emulated "
                f"cloud's flows share the machine with them")


def _raise_on_sigterm(signum, _frame):
    raise SystemExit(f"signal {signum}")


class Testbed:
    """`with Testbed(emucloud, prefix, up_args) as tb:` brings a testbed up and always
    takes it down. tb.truth is truth.json; tb.run()/tb.exec() call emucloud."""

    def __init__(self, emucloud, prefix, up_args=None):
        self.emucloud = emucloud
        self.prefix = prefix
        self.up_args = up_args
        self.truth = None
        self.up_seconds = None
        signal.signal(signal.SIGTERM, _raise_on_sigterm)

    def cmd(self, *words):
        return [self.emucloud, *words]

    def run(self, *words, timeout=60, check=True):
        p = subprocess.run(self.cmd(*words), capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            fail(f"emucloud {' '.join(words)}: exit {p.returncode}: {p.stderr.strip()}")
        return p

    def down(self):
        return self.run("down", "--prefix", self.prefix, check=False)

    def state_dir(self):
        return f"/run/rankmap-emucloud-{self.prefix}"

    def __enter__(self):
        self.load = ForeignLoad()
        self.down()
        if self.up_args is not None:
            t0 = time.monotonic()
            self.run("up", "--prefix", self.prefix, *self.up_args)
            self.up_seconds = time.monotonic() - t0
            with open(os.path.join(self.state_dir(), "truth.json")) as f:
                self.truth = json.load(f)
        return self

    def __exit__(self, exc_type, exc, _tb):
        # A failing test names other load on the machine (scripts/test runs such a test again,
        # alone, and names the cause).
        failing = exc_type is not None and not (
            exc_type is SystemExit and exc.code in (0, None, kSkip))
        busy = self.load.stop()
        if failing and busy:
            print(busy, flush=True)
        p = self.down()
        if p.returncode != 0:
            print(f"warning: emucloud down failed: {p.stderr.strip()}", flush=True)
        # The default state dir of a test's own prefix belongs to the test: scratch files
        # (topologies, hosts files, agent state) go with it.
        shutil.rmtree(self.state_dir(), ignore_errors=True)
        return False

    def exec_argv(self, vm, *cmd):
        return self.cmd("exec", "--prefix", self.prefix, vm, "--", *cmd)

    def racks(self):
        """VM records grouped by rack: [[vm, ...], ...]."""
        out = [[] for _ in range(self.truth["racks"])]
        for vm in self.truth["vms"]:
            out[vm["rack"]].append(vm)
        return out


# --------------------------------------------------------------------------------------
# iperf3


class IperfServer:
    """A one-off iperf3 server in a VM; start() returns once it listens."""

    def __init__(self, tb, vm, port):
        self.proc = subprocess.Popen(
            tb.exec_argv(vm["name"], "iperf3", "-s", "-1", "-p", str(port), "--forceflush"),
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # Raw reads: a buffered readline could swallow the "listening" line.
        fd = self.proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + 10
        seen = b""
        while time.monotonic() < deadline:
            if sel.select(timeout=0.1):
                chunk = os.read(fd, 4096)
                seen += chunk
                if b"listening" in seen:
                    return
                if not chunk:
                    break
        seen = seen.decode(errors="replace")
        self.stop()
        fail(f"iperf3 server in {vm['name']} did not start: {seen.strip()}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def iperf_clients(tb, flows, seconds=3, omit=1):
    """Runs TCP flows [(src_vm, dst_vm), ...] concurrently for `seconds` (after `omit`
    seconds of slow start), returns received Mbit/s per flow."""
    base = 5201
    servers = [IperfServer(tb, dst, base + k) for k, (_, dst) in enumerate(flows)]
    try:
        clients = [subprocess.Popen(
            tb.exec_argv(src["name"], "iperf3", "-c", dst["address"], "-p", str(base + k),
                         "-t", str(seconds), "-O", str(omit), "-J",
                         "--connect-timeout", "3000"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for k, (src, dst) in enumerate(flows)]
        rates = []
        for (src, dst), c in zip(flows, clients):
            try:
                out, err = c.communicate(timeout=seconds + omit + 20)
            except subprocess.TimeoutExpired:
                c.kill()
                c.communicate()
                fail(f"iperf3 {src['name']} -> {dst['name']} timed out")
            if c.returncode != 0:
                fail(f"iperf3 {src['name']} -> {dst['name']}: exit {c.returncode}: "
                     f"{err.strip()} {out[-300:]}")
            j = json.loads(out)
            rates.append(j["end"]["sum_received"]["bits_per_second"] / 1e6)
        return rates
    finally:
        for s in servers:
            s.stop()


def median(xs):
    return statistics.median(xs)
