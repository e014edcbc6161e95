"""Shared helpers for the frameworks proofs on the testbed (fw_test_*.py).

The plan comes from agents_lib.plan_testbed: by default the full pipeline (`emucloud agents
start`, one `rankmap probe` round from vm0's agent, `rankmap plan`: the racks are inferred,
nothing is taken from truth.json); with --source truth from the planner on a probe-free topology
built from truth.json, which proves the launch wrappers alone, without the inference.

Python 3 standard library only; run with /usr/bin/python3 (Debian's torch and xgboost live there).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import agents_lib
import emucloud_testlib as lib


def add_job_args(p):
    """The options both frameworks proofs take: --rankmap, where the plan comes from
    (agents_lib.add_source_args), --repeat, --min-speedup and --json."""
    p.add_argument("--rankmap", required=True)
    agents_lib.add_source_args(p)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--min-speedup", type=float, default=1.3)
    p.add_argument("--json")


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


def print_line(obj):
    """Prints obj as one JSON line in a single write, for a job's rank 0 to report to json_lines.
    torchrun's --tee (which rankmap run adds for torch 1.13 on Python 3.11) copies the worker's
    output file to the console a line at a time as it reads it and prefixes each piece it reads
    with "[default<i>]:"; print(..., flush=True) under PYTHONUNBUFFERED=1 writes the text and the
    newline separately, and a read between the two splices the prefix into the line
    (docs/frameworks.md)."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


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
