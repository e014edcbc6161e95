#!/usr/bin/python3
"""mpi_path_bench: Open MPI allreduce on the emulated cloud, plain mpirun with the provider's
order vs the same command under `rankmap run` (launch mode), for docs/performance.md
(`## MPI path`). A benchmark, not a test: it prints numbers and checks nothing but correctness.

Pipeline: rankmapd agents in every VM -> `rankmap probe` -> `rankmap plan` -> `rankmap run
--plan` (--source probe, the default), or a topology written from truth.json (--source truth).
Per run (--runs, the two orders interleaved and alternating which goes first):
  - ring: Open MPI's ring allreduce (coll_tuned algorithm 4) of --ring-bytes, --ring-iters timed;
  - default: Open MPI's default algorithm choice at every size of --sizes, --small-iters timed
    calls per size below 1 MiB (latency-bound sizes are noisy on a shared machine), --iters above.
Times are the slowest rank's per call; the table has medians over runs and plain/rankmap ratios.

Usage: mpi_path_bench.py --emucloud E --rankmap R --rankmapd D --proof MPI_PROOF_C
       [--vms 8 --racks 2 --seed 25] [--runs 3] [--source probe|truth]
"""

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kTimeoutS = 900
kRingMca = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--proof", required=True, help="emucloud_mpi_proof_c")
    lib.add_testbed_args(p, seed=25)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--ring-bytes", type=int, default=16 << 20)
    p.add_argument("--ring-iters", type=int, default=3)
    p.add_argument("--sizes", default=",".join(str(64 << 10 << k) for k in range(9)))
    p.add_argument("--iters", type=int, default=5, help="timed calls per size from 1 MiB up")
    p.add_argument("--small-iters", type=int, default=25, help="timed calls per size below 1 MiB")
    al.add_source_args(p)
    p.add_argument("--prefix", default="empib")


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    up = lib.up_args(args)
    bench(lib.Testbed(args.emucloud, args.prefix, up), args)


def bench(tb, args):
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-mpi-bench-") as tmp:
        os.chmod(tmp, 0o755)
        t0 = time.monotonic()
        # Agents stopped after the probe: their periodic re-probes would compete with the
        # benchmark.
        _, plan_path, plan, _ = al.plan_testbed(tb, args, tmp)
        print(f"pipeline ({args.source} -> plan): {time.monotonic() - t0:.1f} s", flush=True)
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        provider = [vm["name"] for vm in tb.truth["vms"]]
        def crossings(order):
            out = [0] * args.racks
            for i, h in enumerate(order):
                nxt = order[(i + 1) % len(order)]
                if rack[h] != rack[nxt]:
                    out[rack[h]] += 1
            return out
        print(f"provider order racks {[rack[h] for h in provider]}, ring flows leaving each rack "
              f"{crossings(provider)}")
        print(f"plan {plan['hash'][:19]} racks {[rack[h] for h in plan['order']]}, ring flows "
              f"leaving each rack {crossings(plan['order'])}; predicted "
              f"{plan['predicted']['speedup']:.2f}x ({plan['predicted']['basis']})", flush=True)

        bindir = lib.stand_in_mpirun(tmp, args.rankmap, plan_path)

        def run(order, mca, sizes, iters):
            env = dict(os.environ)
            for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD"):
                env.pop(k, None)
            if order == "rankmap":
                env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
            argv = tb.cmd("mpirun", "--prefix", args.prefix, "--timeout", str(kTimeoutS), "--",
                          *mca, args.proof, "--bytes", sizes, "--iters", str(iters),
                          "--warmup", "1")
            p = subprocess.run(argv, capture_output=True, text=True, env=env,
                               timeout=kTimeoutS + 60)
            if p.returncode != 0:
                lib.fail(f"{order}: exit {p.returncode}: {p.stdout[-1000:]} {p.stderr[-2000:]}")
            if order == "rankmap" and "launch mode" not in p.stderr:
                lib.fail(f"rankmap run did not apply the plan: {p.stderr[-2000:]}")
            return {int(m.group(1)): float(m.group(2)) for m in
                    re.finditer(r"time allreduce bytes=(\d+) iters=\d+ median_s=([0-9.]+)", p.stdout)}

        ring = {"plain": [], "rankmap": []}
        default = {"plain": [], "rankmap": []}
        for i in range(args.runs):
            for order in (("plain", "rankmap") if i % 2 == 0 else ("rankmap", "plain")):
                r = run(order, kRingMca, str(args.ring_bytes), args.ring_iters)
                ring[order].append(r[args.ring_bytes])
                sizes = [int(x) for x in args.sizes.split(",")]
                small = ",".join(str(b) for b in sizes if b < (1 << 20))
                large = ",".join(str(b) for b in sizes if b >= (1 << 20))
                d = run(order, [], small, args.small_iters) if small else {}
                if large:
                    d.update(run(order, [], large, args.iters))
                default[order].append(d)
                print(f"run {i} {order:7s} ring {r[args.ring_bytes]:.3f} s; default "
                      + " ".join(f"{b >> 10}K:{t * 1e3:.1f}ms" for b, t in sorted(d.items())),
                      flush=True)
        pm, rm = statistics.median(ring["plain"]), statistics.median(ring["rankmap"])
        print(f"\n{args.vms} VMs / {args.racks} racks, seed {args.seed}, host "
              f"{lib.fmt_rates(args.host_mbit)}, uplink {lib.fmt_rates(args.uplink_mbit)} Mbit/s, "
              f"plan from {args.source}")
        print(f"ring allreduce {args.ring_bytes >> 20} MiB: plain {pm:.3f} s, rankmap {rm:.3f} s, "
              f"speedup {pm / rm:.2f}x (medians of {args.runs} runs x {args.ring_iters} calls; "
              f"runs plain {ring['plain']} rankmap {ring['rankmap']})")
        print("default algorithm:  size  plain_ms  rankmap_ms  speedup")
        for b in sorted(default["plain"][0]):
            p_ = statistics.median(d[b] for d in default["plain"])
            r_ = statistics.median(d[b] for d in default["rankmap"])
            print(f"  {b >> 10:>8} KiB  {p_ * 1e3:8.2f}  {r_ * 1e3:10.2f}  {p_ / r_:6.2f}x")


if __name__ == "__main__":
    main()
