#!/usr/bin/python3
"""run_overhead.py: librankmap_mpi.so's overhead with an identity plan, on this machine.

Runs overhead_bench (8-byte MPI_Allreduce and MPI_Barrier, --calls each) under
`mpirun -np N --mca btl self,vader`, alternately without and with the shim (the order of the
pair alternates too), --runs pairs, and prints the median per-call time of each and the ratio.
The identity plan is made by `rankmap plan` from a one-host topology (this machine, N ranks on
it): the planner's identity fallback, which the shim still applies (it splits the world and
substitutes it in every call), so the numbers include the whole wrapper path.

On a shared machine, --rt PRIO runs the ranks at SCHED_FIFO priority PRIO (chrt; root), each
bound to a core, so that other processes do not preempt the busy-polling ranks: without it the
per-call times on a loaded 2-core machine vary by 10x between runs and hide a few nanoseconds.

Usage: run_overhead.py --rankmap BIN --shim LIB --bench BIN [--np 2] [--calls 100000] [--runs 7]
                       [--rt PRIO]
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile


def run_bench(args, plan, shim):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = ["chrt", "-f", str(args.rt)] if args.rt > 0 else []
    argv += ["mpirun", "--oversubscribe", "-np", str(args.np),
            "--bind-to", "core" if args.rt > 0 else "none",
            "--mca", "btl", "self,vader", "--mca", "pml", "ob1"]
    if shim:
        argv += ["-x", f"LD_PRELOAD={args.shim}", "-x", f"RANKMAP_PLAN={plan}"]
    argv += [args.bench, "--calls", str(args.calls)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env)
    m = re.search(r"allreduce8_ns=([0-9.]+) barrier_ns=([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        sys.exit(f"run_overhead: {' '.join(argv)}: exit {p.returncode}: {p.stdout} {p.stderr}")
    if shim and "reordered by plan" not in p.stderr:
        sys.exit(f"run_overhead: the shim did not apply the plan: {p.stderr}")
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rankmap", required=True)
    ap.add_argument("--shim", required=True)
    ap.add_argument("--bench", required=True)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--rt", type=int, default=0, help="SCHED_FIFO priority for the ranks (0: off)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rankmap-overhead-") as tmp:
        host = socket.gethostname().split(".")[0]
        topo = {"schema_version": 1, "hosts": [{"name": host, "address": "127.0.0.1"}],
                "bandwidth_mbps": [[None]], "latency_us": [[None]],
                "probe": {"latency_samples": 0, "bandwidth_max_ms": 0, "bandwidth_max_bytes": 0,
                          "contention": False},
                "time": "", "version": 0}
        with open(os.path.join(tmp, "topology.json"), "w") as f:
            json.dump(topo, f)
        plan = os.path.join(tmp, "plan.json")
        subprocess.run([args.rankmap, "plan", "--topology", os.path.join(tmp, "topology.json"),
                        "--ranks-per-host", str(args.np), "--out", plan], check=True,
                       capture_output=True)
        results = {False: [], True: []}
        for i in range(args.runs):
            for shim in ((False, True) if i % 2 == 0 else (True, False)):
                results[shim].append(run_bench(args, plan, shim))
                a, b = results[shim][-1]
                print(f"run {i} {'shim ' if shim else 'plain'} allreduce8 {a:.1f} ns "
                      f"barrier {b:.1f} ns", flush=True)
        for k, name in ((0, "allreduce 8 B"), (1, "barrier")):
            plain = statistics.median(r[k] for r in results[False])
            shim = statistics.median(r[k] for r in results[True])
            print(f"{name}: plain {plain:.1f} ns/call, shim {shim:.1f} ns/call, "
                  f"overhead {100 * (shim / plain - 1):+.2f}% (medians of {args.runs} runs of "
                  f"{args.calls} calls, {args.np} ranks{', SCHED_FIFO' if args.rt else ''})")


if __name__ == "__main__":
    main()
