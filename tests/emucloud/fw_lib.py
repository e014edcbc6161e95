"""Shared helpers for the frameworks proofs on the testbed (fw_test_*.py).

The plan comes from the full pipeline when --rankmapd is given (`emucloud agents start`, one
`rankmap probe` round from vm0's agent, `rankmap plan`: the racks are inferred, nothing is taken
from truth.json). With --source truth it comes instead from the planner on a probe-free topology
built from truth.json (configured rates, the truth's racks as the hierarchy, `rankmap plan
--use-groups`): this proves the launch wrappers alone, without the inference.

Python 3 standard library only; run with /usr/bin/python3 (Debian's torch and xgboost live there).
"""

import json
import os
import re
import signal
import subprocess
import time

import agents_lib
import emucloud_testlib as lib


def topology_from_truth(truth):
    """topology.json (schema 1) from truth.json: see the module doc."""
    vms = truth["vms"]
    n = len(vms)
    bw, lat = [], []
    for a in vms:
        brow, lrow = [], []
        for b in vms:
            if a is b:
                brow.append(None)
                lrow.append(None)
                continue
            same = a["rack"] == b["rack"]
            brow.append(float(truth["host_mbit"] if same else truth["uplink_mbit"]))
            base = 60.0 if same else 120.0
            lrow.append({"min": base, "median": base + 10, "p90": base + 20, "p99": base + 40})
        bw.append(brow)
        lat.append(lrow)
    racks = [[vm["name"] for vm in vms if vm["rack"] == r] for r in range(truth["racks"])]
    return {
        "schema_version": 1,
        "hosts": [{"name": vm["name"], "address": vm["address"]} for vm in vms],
        "bandwidth_mbps": bw,
        "latency_us": lat,
        "probe": {"latency_samples": 0, "bandwidth_max_ms": 0, "bandwidth_max_bytes": 0,
                  "contention": False},
        "time": "",
        "version": 0,
        "groups": [{"name": "rack", "confidence": 1.0, "groups": [r for r in racks if r]}],
        "_n": n,
    }


def add_source_args(p):
    """--rankmapd and --source for fw_test_*.py."""
    p.add_argument("--rankmapd", help="rankmapd binary: plan from a probe by agents in every VM")
    p.add_argument("--source", choices=("probe", "truth"), default="probe",
                   help="probe (needs --rankmapd) or truth (probe-free topology from truth.json)")


def make_plan(rankmap, truth, workdir, args=None, tb=None):
    """Writes workdir/topology.json and workdir/plan.json; returns (topology path, plan path,
    plan dict). From a probe when args.source is "probe" (the default; needs args.rankmapd and
    tb), else from truth.json with --use-groups (see the module doc)."""
    tpath = os.path.join(workdir, "topology.json")
    ppath = os.path.join(workdir, "plan.json")
    if args is not None and args.source == "probe":
        agents_lib.probe_topology(tb, args.rankmapd, rankmap, tpath)
        words = [rankmap, "plan", "-t", tpath, "-o", ppath]
    else:
        topo = topology_from_truth(truth)
        topo.pop("_n")
        with open(tpath, "w") as f:
            json.dump(topo, f, indent=1)
        words = [rankmap, "plan", "-t", tpath, "--use-groups", "-o", ppath]
    p = subprocess.run(words, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        lib.fail(f"rankmap plan: exit {p.returncode}: {p.stderr.strip()}")
    with open(ppath) as f:
        plan = json.load(f)
    return tpath, ppath, plan


def rack_of(truth):
    return {vm["name"]: vm["rack"] for vm in truth["vms"]}


def cross_rack_hops(order, truth):
    """Ring hops (including the wrap-around) that cross racks."""
    r = rack_of(truth)
    return sum(r[order[i]] != r[order[(i + 1) % len(order)]] for i in range(len(order)))


def require_python_module(module):
    p = subprocess.run(["/usr/bin/python3", "-c", f"import {module}"], capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        lib.skip(f"/usr/bin/python3 cannot import {module} (install python3-{module} via "
                 f"scripts/setup-deps)")


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def kill_vm_processes(truth, keep=()):
    """Kills every process left in the testbed's VMs and head (a job that timed out)."""
    pids = set()
    for ns in [vm["name"] for vm in truth["vms"]] + [truth["head"]["name"]]:
        out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        pids |= {int(x) for x in out.split() if x.isdigit()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids - set(keep):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.5)


def json_lines(text, key):
    """Objects {key: ...} from lines of `text` (a torchrun tee prefix "[default0]:" allowed)."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"^\[[^\]]*\]:", "", line.strip())
        if line.startswith("{") and f'"{key}"' in line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out
