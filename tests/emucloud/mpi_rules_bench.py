#!/usr/bin/python3
"""mpi_rules_bench: Open MPI's allreduce on the emulated cloud under `rankmap run -- mpirun` with
no algorithm flags (the plan's order and the plan's coll_tuned rules) against every algorithm
Open MPI can be forced to in the plan's order, and against plain mpirun (the provider's order, Open
MPI's own choice), 64 KiB to 64 MiB; and each forced algorithm against the planner's prediction
(`rankmap plan --predictions`), the calibration of docs/planner.md. A benchmark, not a test: it
prints numbers and checks only correctness (the program checks every element).

Series (--series; each run rotates their order, so drift spreads over all of them):
  plain     plain mpirun, provider order, no flags (Open MPI's fixed decision)
  rankmap   the same command through `rankmap run --plan P` (a stand-in mpirun first on PATH):
            plan order and the plan's rules (RANKMAP_MPI_RULES=auto)
  forced-N  mpirun in plan order with coll_tuned_allreduce_algorithm N (N = 1..6; 5 with
            coll_tuned_allreduce_algorithm_segmentsize --segsize, else it is the ring)
Sizes below 1 MiB run --small-iters timed calls per job, the others --large-iters; times are the
slowest rank's per call, medians over calls, then medians over runs.

Usage (the two testbeds of docs/performance.md):
  mpi_rules_bench.py --emucloud E --rankmap R --proof MPI_PROOF_C [--runs 3]
  mpi_rules_bench.py ... --vms 10 --racks 3 --uplink-mbit 500,125,250 --seed 25
Prints the table (ms) and, per size, whether rankmap is within 10% of the best forced algorithm
and faster than plain; --out-dir keeps plan.json, predictions.json and results.json.
"""

import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kTimeoutS = 900
kNames = {1: "basic_linear", 2: "nonoverlapping", 3: "recursive_doubling", 4: "ring",
          5: "segmented_ring", 6: "rabenseifner"}


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--proof", required=True, help="emucloud_mpi_proof_c")
    lib.add_testbed_args(p, seed=25)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--sizes", default=",".join(str(64 << 10 << 2 * k) for k in range(6)),
                   help="bytes, comma-separated (default 64 KiB to 64 MiB by 4)")
    p.add_argument("--small-iters", type=int, default=20)
    p.add_argument("--large-iters", type=int, default=3)
    p.add_argument("--series", default="plain,rankmap," + ",".join(f"forced-{n}" for n in kNames))
    p.add_argument("--segsize", type=int, default=128 << 10,
                   help="segment size for forced-5 (segmented ring)")
    p.add_argument("--plan-args", default=" ".join(lib.plan_calibration()),
                   help="extra `rankmap plan` arguments (default: the emulated cloud's calibration)")
    al.add_source_args(p)
    p.set_defaults(source="truth")
    p.add_argument("--prefix", default="erbench")
    p.add_argument("--out-dir", default="")


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    bench(lib.Testbed(args.emucloud, args.prefix, lib.up_args(args)), args)


def bench(tb, args):
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-mpi-rules-bench-") as tmp:
        os.chmod(tmp, 0o755)
        out_dir = args.out_dir or tmp
        os.makedirs(out_dir, exist_ok=True)
        predictions = os.path.join(out_dir, "predictions.json")
        sizes = [int(x) for x in args.sizes.split(",")]
        t0 = time.monotonic()
        _, plan_path, plan, _ = al.plan_testbed(
            tb, args, out_dir, shlex.split(args.plan_args) +
            ["--predictions", predictions, "--sizes", ",".join(map(str, sizes))])
        print(f"pipeline ({args.source} -> plan): {time.monotonic() - t0:.1f} s", flush=True)
        with open(predictions) as f:
            predicted = json.load(f)["open_mpi"]["allreduce"]
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        provider = [vm["name"] for vm in tb.truth["vms"]]
        print(f"provider order racks {[rack[h] for h in provider]}; plan {plan['hash'][:19]} "
              f"racks {[rack[h] for h in plan['order']]}")
        print("plan's Open MPI allreduce: " + "; ".join(
            f"{r['algorithm']}{' seg ' + str(r['segsize']) if r['segsize'] else ''} from "
            f"{r['min_bytes']}" for r in plan["open_mpi"]["allreduce"]), flush=True)

        bindir = lib.stand_in_mpirun(tmp, args.rankmap, plan_path)
        hostfile = os.path.join(tmp, "hosts-plan")
        with open(hostfile, "w") as f:
            f.write("".join(h + "\n" for h in plan["order"]))
        os.chmod(hostfile, 0o644)
        groups = [(g, it) for g, it in (([b for b in sizes if b < 1 << 20], args.small_iters),
                                        ([b for b in sizes if b >= 1 << 20], args.large_iters))
                  if g]

        def run(series, group, iters):
            env = dict(os.environ)
            for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD", "RANKMAP_MPI_RULES"):
                env.pop(k, None)
            extra, mca = [], []
            if series == "rankmap":
                env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
            elif series.startswith("forced-"):
                n = int(series.split("-")[1])
                extra = ["--hostfile", hostfile]
                mca = ["--mca", "coll_tuned_use_dynamic_rules", "1",
                       "--mca", "coll_tuned_allreduce_algorithm", str(n)]
                if n == 5:
                    mca += ["--mca", "coll_tuned_allreduce_algorithm_segmentsize",
                            str(args.segsize)]
            argv = tb.cmd("mpirun", "--prefix", args.prefix, *extra, "--timeout", str(kTimeoutS),
                          "--", *mca, args.proof, "--bytes", ",".join(map(str, group)),
                          "--iters", str(iters), "--warmup", "1")
            p = subprocess.run(argv, capture_output=True, text=True, env=env,
                               timeout=kTimeoutS + 60)
            if p.returncode != 0:
                lib.fail(f"{series}: exit {p.returncode}: {p.stdout[-1000:]} {p.stderr[-2000:]}")
            if series == "rankmap" and "coll_tuned rules" not in p.stderr:
                lib.fail(f"rankmap run did not hand over the rules: {p.stderr[-2000:]}")
            return {int(m.group(1)): float(m.group(2)) for m in re.finditer(
                r"time allreduce bytes=(\d+) iters=\d+ median_s=([0-9.]+)", p.stdout)}

        series = args.series.split(",")
        results = {s: [] for s in series}
        for i in range(args.runs):
            k = i % len(series)
            for s in series[k:] + series[:k]:
                r = {}
                t1 = time.monotonic()
                for group, iters in groups:
                    r.update(run(s, group, iters))
                results[s].append(r)
                print(f"run {i} {s:10s} ({time.monotonic() - t1:5.1f} s) " +
                      " ".join(f"{b >> 10}K:{t * 1e3:.1f}" for b, t in sorted(r.items())),
                      flush=True)
            with open(os.path.join(out_dir, "results.json"), "w") as f:
                json.dump({"sizes": sizes, "results": results}, f)
        report(args, plan, sizes, results, predicted)


def report(args, plan, sizes, results, predicted):
    med = {s: {b: statistics.median(r[b] for r in rs) for b in sizes} for s, rs in results.items()}
    forced = [s for s in med if s.startswith("forced-")]

    def key(s):  # the prediction's key for a forced series
        n = int(s.split("-")[1])
        return f"{kNames[n]} seg={args.segsize}" if n == 5 else kNames[n]

    print(f"\n{args.vms} VMs / {args.racks} racks, seed {args.seed}, host "
          f"{lib.fmt_rates(args.host_mbit)}, uplink {lib.fmt_rates(args.uplink_mbit)} Mbit/s, "
          f"plan from {args.source} ({args.plan_args}); medians of {args.runs} runs (ms)")
    cols = list(med)
    print("| size | " + " | ".join(cols) + " | best forced | rankmap / best | plain / rankmap |")
    print("|---" * (len(cols) + 4) + "|")
    verdict = []
    for b in sizes:
        best = min(forced, key=lambda s: med[s][b]) if forced else None
        cells = [f"{med[c][b] * 1e3:.1f}" for c in cols]
        line = f"| {b >> 10} KiB | " + " | ".join(cells)
        if best and "rankmap" in med:
            ratio = med["rankmap"][b] / med[best][b]
            line += f" | {best} | {ratio:.2f} |"
            ok = ratio <= 1.10
        else:
            line += " | - | - |"
            ok = None
        if "plain" in med and "rankmap" in med:
            faster = med["plain"][b] / med["rankmap"][b]
            line += f" {faster:.2f} |"
            verdict.append((b, ok, faster > 1))
        else:
            line += " - |"
        print(line)
    for b, within, faster in verdict:
        print(f"{b >> 10:>8} KiB: rankmap within 10% of the best forced: "
              f"{'yes' if within else 'NO'}; faster than plain: {'yes' if faster else 'NO'}")
    print("\nmeasured / predicted per forced algorithm (the calibration):")
    print("| algorithm | " + " | ".join(f"{b >> 10} KiB" for b in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for s in forced:
        pred = predicted.get(key(s), {})
        cells = []
        for b in sizes:
            p = pred.get(str(b))
            cells.append(f"{med[s][b] * 1e6 / p:.2f}" if p else "-")
        print(f"| {key(s)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
