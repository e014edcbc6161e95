"""Helpers for the rankmapd integration tests on the emucloud testbed (standard library only).

The agents' HTTP APIs listen on each VM's loopback, so every call runs inside a VM through
`emucloud exec` (a small Python client, or the `rankmap` command line).
"""

import json
import os
import subprocess
import time

import emucloud_testlib as tl

kHttpClient = r"""
import sys, urllib.request, urllib.error
method, url, token, body = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
req = urllib.request.Request(url, method=method, data=body.encode() if method == "POST" else None)
if token:
    req.add_header("Authorization", "Bearer " + token)
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        print(r.status); sys.stdout.write(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); sys.stdout.write(e.read().decode())
"""


def parse_args(extra=None):
    def more(p):
        p.add_argument("--rankmapd", required=True)
        p.add_argument("--rankmap", required=True)
        if extra:
            extra(p)
    return tl.parse_args(more)


class Agents:
    """Agents in every VM of a testbed `tb` (an emucloud_testlib.Testbed that is up)."""

    def __init__(self, tb, rankmapd, rankmap):
        self.tb = tb
        self.rankmapd = os.path.abspath(rankmapd)
        self.rankmap = os.path.abspath(rankmap)
        self.dir = os.path.join(tb.state_dir(), "agents")
        self.last_probe_s = None  # wall seconds of the last probe() that succeeded

    def start(self, *extra, vms=()):
        args = ["agents", "start", "--prefix", self.tb.prefix, "--rankmapd", self.rankmapd]
        for v in vms:
            args += ["--vm", v]
        self.tb.run(*args, *extra, timeout=60)

    def stop(self, vms=(), kill=False):
        args = ["agents", "stop", "--prefix", self.tb.prefix]
        for v in vms:
            args += ["--vm", v]
        if kill:
            args += ["--signal", "KILL"]
        self.tb.run(*args, timeout=60)

    def file(self, name):
        return os.path.join(self.dir, name)

    def token(self):
        with open(self.file("token")) as f:
            return f.read().strip()

    def http(self, vm, method, path, body="", token=""):
        """(status, body) of an HTTP call to the agent in `vm`."""
        argv = self.tb.exec_argv(vm, "/usr/bin/python3", "-c", kHttpClient, method,
                                 f"http://127.0.0.1:7410{path}", token, body)
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            tl.fail(f"HTTP {method} {path} in {vm}: exit {p.returncode}: {p.stderr.strip()}")
        status, _, text = p.stdout.partition("\n")
        return int(status), text

    def get_json(self, vm, path):
        status, text = self.http(vm, "GET", path)
        return status, (json.loads(text) if text.strip() else None)

    def probe(self, vm, *extra, out=None, timeout=600):
        """Runs `rankmap probe` in `vm` against its agent; returns (exit, seconds, json, stderr)."""
        out = out or os.path.join(self.tb.state_dir(), f"topology.{os.getpid()}.json")
        argv = self.tb.exec_argv(vm, self.rankmap, "probe", "--hosts", self.file("hosts"),
                                 "--agent", "http://127.0.0.1:7410", "--token-file",
                                 self.file("token"), "--out", out, "--json", *extra)
        t0 = time.monotonic()
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        dt = time.monotonic() - t0
        summary = None
        if p.returncode == 0:
            summary = json.loads(p.stdout.strip().splitlines()[-1])
            self.last_probe_s = dt
            with open(out) as f:
                summary["topology"] = json.load(f)
        return p.returncode, dt, summary, p.stderr

    def wait_version(self, vm, above, timeout):
        """Waits until the agent in `vm` has a topology version > `above`; returns it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, h = self.get_json(vm, "/v1/health")
            if status == 200 and h.get("topology_version") and h["topology_version"] > above:
                return h["topology_version"]
            time.sleep(0.5)
        return None

    def log_tail(self, vm, lines=20):
        try:
            with open(os.path.join(self.tb.state_dir(), "services", f"agents.{vm}.log")) as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"


def probe_topology(tb, rankmapd, rankmap, path, keep_running=False):
    """The pipeline's first step for the proofs and benchmarks: rankmapd in every VM, one
    `rankmap probe` round from the first VM's agent into `path`. Returns the Agents (still
    running with keep_running, for calls to them; else stopped). Skips without rankmapd."""
    if not rankmapd or not os.access(rankmapd, os.X_OK):
        tl.skip(f"rankmapd not built ({rankmapd!r}); use --source truth")
    agents = Agents(tb, rankmapd, rankmap)
    agents.start()
    try:
        rc, dt, summary, err = agents.probe(tb.truth["vms"][0]["name"], out=path)
        if rc != 0:
            tl.fail(f"rankmap probe: exit {rc}: {err.strip()[-2000:]}")
        topo = summary["topology"]
        missing = sum(1 for i, row in enumerate(topo["bandwidth_mbps"]) for j, v in enumerate(row)
                      if i != j and v is None)
        print(f"probe: {len(topo['hosts'])} hosts, {missing} directed pairs missing, {dt:.1f} s",
              flush=True)
    finally:
        if not keep_running:
            agents.stop()
    return agents


def add_source_args(p, rankmapd_required=False):
    """--rankmapd and --source: where the plan of a proof or benchmark comes from."""
    p.add_argument("--rankmapd", required=rankmapd_required, default="",
                   help="rankmapd binary: plan from a probe by agents in every VM")
    p.add_argument("--source", choices=("probe", "truth"), default="probe",
                   help="probe (needs --rankmapd) or truth (probe-free topology from truth.json)")


def host_rate(truth, vm):
    """A VM's host link rate (Mbit/s, each direction) from truth.json."""
    return float(vm.get("host_mbit", truth["host_mbit"]))


def uplink_rate(truth, rack):
    """A rack's uplink rate (Mbit/s, each direction) from truth.json."""
    by_rack = truth.get("uplink_mbit_by_rack")
    return float(by_rack[rack] if by_rack else truth["uplink_mbit"])


def topology_from_truth(truth):
    """A probe-free topology.json (schema 2) from truth.json: the truth's racks as its groups and
    its link rates as the link model (each VM's host link, each rack's uplink), the pair matrix
    those links give (the narrowest link on each path), and fixed latencies; planned with
    `rankmap plan --use-groups`. Proves what follows the probe without the inference. No pair is
    listed as measured: every rate is the configured one."""
    vms = truth["vms"]
    by_name = {vm["name"]: vm for vm in vms}
    bw, lat = [], []
    for a in vms:
        brow, lrow = [], []
        for b in vms:
            if a is b:
                brow.append(None)
                lrow.append(None)
                continue
            brow.append(expected_mbps(truth, a["name"], b["name"]))
            base = 60.0 if a["rack"] == b["rack"] else 120.0
            lrow.append({"min": base, "median": base + 10, "p90": base + 20, "p99": base + 40})
        bw.append(brow)
        lat.append(lrow)
    racks = [r for r in ([vm["name"] for vm in vms if vm["rack"] == k]
                         for k in range(truth["racks"])) if r]
    link = lambda mbit: {"out_mbps": mbit, "in_mbps": mbit}  # noqa: E731
    return {
        "schema_version": 2,
        "hosts": [{"name": vm["name"], "address": vm["address"]} for vm in vms],
        "bandwidth_mbps": bw,
        "latency_us": lat,
        "probe": {"latency_samples": 0, "bandwidth_max_ms": 0, "bandwidth_max_bytes": 0,
                  "contention": False},
        "time": "",
        "version": 0,
        "groups": [{"name": "rack", "confidence": 1.0, "groups": racks}],
        "links": {"hosts": [link(host_rate(truth, vm)) for vm in vms],
                  "uplinks": [[link(uplink_rate(truth, by_name[r[0]]["rack"])) for r in racks]],
                  "host_latency_us": 15.0, "uplink_latency_us": [15.0]},
        "measured": [],
    }


def plan_testbed(tb, args, workdir, plan_args=(), keep_running=False):
    """The pipeline up to plan.json for a proof or benchmark: workdir/topology.json from a probe
    (args.source "probe": probe_topology) or from truth.json (topology_from_truth), then
    `rankmap plan` into workdir/plan.json with `plan_args`. Returns (topology path, plan path,
    plan dict, the Agents or None); with keep_running the agents are still up."""
    tpath = os.path.join(workdir, "topology.json")
    ppath = os.path.join(workdir, "plan.json")
    words = [args.rankmap, "plan", "--topology", tpath, "--out", ppath, *plan_args]
    agents = None
    if args.source == "probe":
        agents = probe_topology(tb, args.rankmapd, args.rankmap, tpath, keep_running)
    else:
        with open(tpath, "w") as f:
            json.dump(topology_from_truth(tb.truth), f, indent=1)
        words.append("--use-groups")
    p = subprocess.run(words, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        tl.fail(f"rankmap plan: exit {p.returncode}: {p.stderr.strip()}")
    if p.stdout.strip():
        print(p.stdout.strip(), flush=True)
    with open(ppath) as f:
        plan = json.load(f)
    return tpath, ppath, plan, agents


def expected_mbps(truth, a, b):
    """The single-flow rate a -> b the testbed's shaping allows: the narrowest link on the path
    (both host links; both racks' uplinks when the racks differ)."""
    vm = {v["name"]: v for v in truth["vms"]}
    rate = min(host_rate(truth, vm[a]), host_rate(truth, vm[b]))
    if vm[a]["rack"] != vm[b]["rack"]:
        rate = min(rate, uplink_rate(truth, vm[a]["rack"]), uplink_rate(truth, vm[b]["rack"]))
    return rate


def bandwidth_errors(topo, truth):
    """[(src, dst, measured or None, expected, relative error)] for every ordered pair."""
    names = [h["name"] for h in topo["hosts"]]
    out = []
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            if i == j:
                continue
            v = topo["bandwidth_mbps"][i][j]
            exp = expected_mbps(truth, a, b)
            out.append((a, b, v, exp, None if v is None else v / exp - 1))
    return out


def racks_of(truth):
    racks = {}
    for vm in truth["vms"]:
        racks.setdefault(vm["rack"], set()).add(vm["name"])
    return sorted(sorted(r) for r in racks.values())


def shared_link_groups(topo):
    return sorted(sorted(l["hosts"]) for l in topo.get("shared_links", []))


def report(msg):
    print(msg, flush=True)
