#!/usr/bin/python3
"""engine_table_bench: the collective engine against Open MPI on the emulated cloud, 64 KiB to
64 MiB, in the provider's order and in the plan's order, for docs/performance.md (`## Engine`).
A benchmark, not a test: it prints numbers and checks only correctness.

Testbed: N VMs in R racks (default 8 / 2, host 1000, uplink 250 Mbit/s, seed 25: the provider
order alternates the racks). topology.json comes from the agents (`rankmap probe`, the default)
or from truth.json (--source truth); `rankmap plan -c all` makes plan.json. Then, per run
(--runs; the series' order rotates from run to run so that drift spreads over all of them):

  engine  `rankmap bench --algo A --plan plan.json` (A = ring, tree, hier, rhd, auto) launched in
          the provider's order (the engine applies the plan's permutation), and `--algo ring`
          without a plan (provider order).
  mpi     emucloud_mpi_proof_c (MPI_Allreduce, int32 sum) with Open MPI's default choice and
          its ring (coll_tuned_allreduce_algorithm 4) in the provider's order, and its default
          and every algorithm forced (1-6) in the plan's (hostfile, `--mca rmaps seq`: rank i on
          line i). `--back-to-back`: the engine's statistic, below.

Both sides sum int32 (--dtype) and are timed alike: after the warm-up, one barrier, then the
timed calls back to back; time = the slowest rank's total over the calls / their number.

Sizes below --large-from run --small-iters timed iterations, the others --large-iters (after
--warmup untimed ones). The first run checks every element of every engine result (--check).
Figures are medians over runs; the table is markdown (ms), followed by the checks:
  - engine (plan's choice, plan order) at 16 MiB against the uplink-model bound of a ring
    crossing each uplink once per direction, 2(n-1)/n S / uplink;
  - engine (plan's choice, and best algorithm) >= Open MPI's best algorithm in the plan's order.

Usage: engine_table_bench.py --emucloud E --rankmap R [--rankmapd D] --proof MPI_PROOF_C
       [--runs 3] [--source probe|truth] [--series a,b,...] [--out-dir DIR]
       engine_table_bench.py ... --report --out-dir DIR   # the table again from DIR's results
Runs as root and holds the testbed for its whole duration (about 20 minutes for 3 runs of every
series); take the shared emucloud lock around it where several people use the machine.
"""

import json
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
# name -> (kind, algorithm or MCA, order)
kSeries = {
    "eng-ring-plan": ("engine", "ring", "plan"),
    "eng-tree-plan": ("engine", "tree", "plan"),
    "eng-hier-plan": ("engine", "hier", "plan"),
    "eng-rhd-plan": ("engine", "rhd", "plan"),
    "eng-auto-plan": ("engine", "auto", "plan"),
    "eng-ring-prov": ("engine", "ring", "provider"),
    "mpi-default-prov": ("mpi", "default", "provider"),
    "mpi-ring-prov": ("mpi", "ring", "provider"),
    "mpi-default-plan": ("mpi", "default", "plan"),
    # coll_tuned_allreduce_algorithm N in the plan's order: 1 basic_linear, 2 nonoverlapping,
    # 3 recursive_doubling, 4 ring, 5 segmented_ring, 6 rabenseifner.
    **{f"mpi-{n}-plan": ("mpi", str(n), "plan") for n in range(1, 7)},
}
kForcedMca = ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca",
              "coll_tuned_allreduce_algorithm"]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip())
    if not m:
        raise SystemExit(f"bad size {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def fmt_size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--proof", required=True, help="emucloud_mpi_proof_c")
    lib.add_testbed_args(p, seed=25)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--min-bytes", default="64K")
    p.add_argument("--max-bytes", default="64M")
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--large-from", default="1M", help="sizes from here use --large-iters")
    p.add_argument("--small-iters", type=int, default=20)
    p.add_argument("--large-iters", type=int, default=2)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--dtype", default="int32",
                   help="the engine's element type (Open MPI's program sums int32)")
    p.add_argument("--series", default=",".join(kSeries), help="comma list of " + ",".join(kSeries))
    al.add_source_args(p)
    p.add_argument("--segment", default="",
                   help="RANKMAP_SEGMENT_SIZE for the engine's ranks (default: the engine's)")
    p.add_argument("--port", type=int, default=29640, help="first RANKMAP_ROOT port")
    p.add_argument("--prefix", default="engt")
    p.add_argument("--out-dir", default="", help="keep topology.json, plan.json, results.json here")
    p.add_argument("--report", action="store_true",
                   help="only print the table from --out-dir's results.json and plan.json")


def main():
    args = lib.parse_args(add_args)
    if args.report:
        with open(os.path.join(args.out_dir, "results.json")) as f:
            r = json.load(f)
        with open(os.path.join(args.out_dir, "plan.json")) as f:
            plan = json.load(f)
        results = {name: [{int(b): tuple(v) for b, v in run.items()} for run in runs]
                   for name, runs in r["results"].items()}
        report(args, plan, r["sizes"], results, args.out_dir)
        return
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    for s in args.series.split(","):
        if s not in kSeries:
            lib.fail(f"--series: unknown {s!r}")
    up = lib.up_args(args)
    bench(lib.Testbed(args.emucloud, args.prefix, up), args)


def run_engine(tb, rankmap, prefix, port, algo, sizes, factor, iters, warmup, plan_path=None,
               check=False, segment="", dtype="float"):
    """`rankmap bench --algo ALGO` on every VM of the testbed `tb`, launched in the provider's
    order (with plan_path the engine applies the plan's permutation), sizes[0] to sizes[-1] by
    `factor`, rank 0's root on the first VM at `port`. Returns {size: (seconds, algo)}: the
    slowest rank's mean per iteration. Fails on an exit, a fallback, or (check) a wrong element."""
    env = dict(os.environ)
    for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD", "RANKMAP_ALGO"):
        env.pop(k, None)
    root_addr = tb.truth["vms"][0]["address"]
    words = ["-x", f"RANKMAP_ROOT={root_addr}:{port}",
             *(["-x", f"RANKMAP_SEGMENT_SIZE={segment}"] if segment else []), rankmap, "bench",
             "-b", str(sizes[0]), "-e", str(sizes[-1]), "-f", str(factor), "-n", str(iters),
             "-w", str(warmup), "--algo", algo, "-d", dtype, "--json"]
    if plan_path:
        words += ["--plan", plan_path]
    if check:
        words.append("--check")
    argv = tb.cmd("mpirun", "--prefix", prefix, "--timeout", str(kTimeoutS), "--", *words)
    order = "plan" if plan_path else "provider"
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=kTimeoutS + 60)
    if p.returncode != 0:
        lib.fail(f"engine {algo} {order}: exit {p.returncode}: {p.stdout[-1000:]} "
                 f"{p.stderr[-2000:]}")
    out = {}
    for line in p.stdout.splitlines():
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        if j.get("summary"):
            if j.get("fallbacks"):
                lib.fail(f"engine {algo} {order}: {j['fallbacks']} fallbacks")
            continue
        if check and j["wrong"] != 0:
            lib.fail(f"engine {algo} {order} {j['size']}: {j['wrong']} wrong elements")
        out[j["size"]] = (j["time_us"] * 1e-6, j["algo"])
    return out


def bench(tb, args):
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-engine-bench-") as tmp:
        os.chmod(tmp, 0o755)
        out_dir = args.out_dir or tmp
        os.makedirs(out_dir, exist_ok=True)
        t0 = time.monotonic()
        # Agents stopped after the probe: their periodic re-probes would compete with the
        # benchmark.
        _, plan_path, plan, _ = al.plan_testbed(tb, args, out_dir, ["-c", "all"])
        print(f"pipeline ({args.source} -> plan): {time.monotonic() - t0:.1f} s", flush=True)
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        provider = [vm["name"] for vm in tb.truth["vms"]]
        print(f"provider order {' '.join(provider)}, racks {[rack[h] for h in provider]}")
        print(f"plan {plan['hash'][:19]} order {' '.join(plan['order'])}, racks "
              f"{[rack[h] for h in plan['order']]}", flush=True)
        hostfiles = {}
        for name, order in (("provider", provider), ("plan", plan["order"])):
            hostfiles[name] = os.path.join(tmp, f"hosts-{name}")
            with open(hostfiles[name], "w") as f:
                f.write("".join(h + "\n" for h in order))
            os.chmod(hostfiles[name], 0o644)

        sizes = []
        s = parse_size(args.min_bytes)
        while s <= parse_size(args.max_bytes):
            sizes.append(s)
            s *= args.factor
        large_from = parse_size(args.large_from)
        groups = [(g, it) for g, it in (([b for b in sizes if b < large_from], args.small_iters),
                                        ([b for b in sizes if b >= large_from], args.large_iters))
                  if g]
        port = [args.port]

        def engine(algo, order, group, iters, check):
            port[0] += 1
            return run_engine(tb, args.rankmap, args.prefix, port[0], algo, group, args.factor,
                              iters, args.warmup, plan_path if order == "plan" else None, check,
                              args.segment, args.dtype)

        def mpi(which, order, group, iters, check):
            argv = tb.cmd("mpirun", "--prefix", args.prefix, "--hostfile", hostfiles[order],
                          "--timeout", str(kTimeoutS), "--",
                          *({"default": [], "ring": kForcedMca + ["4"]}.get(
                              which, kForcedMca + [which])), args.proof,
                          "--bytes", ",".join(str(b) for b in group), "--iters", str(iters),
                          "--warmup", str(args.warmup), "--back-to-back")
            p = subprocess.run(argv, capture_output=True, text=True, timeout=kTimeoutS + 60)
            if p.returncode != 0:
                lib.fail(f"mpi {which} {order}: exit {p.returncode}: {p.stdout[-1000:]} "
                         f"{p.stderr[-2000:]}")
            return {int(m.group(1)): (float(m.group(2)), which) for m in re.finditer(
                r"time allreduce bytes=(\d+) iters=\d+ mean_s=([0-9.]+)", p.stdout)}

        series = args.series.split(",")
        results = {name: [] for name in series}  # per run: {size: (seconds, algo)}
        for run in range(args.runs):
            k = run % len(series)
            for name in series[k:] + series[:k]:
                kind, algo, order = kSeries[name]
                r = {}
                t1 = time.monotonic()
                for group, iters in groups:
                    fn = engine if kind == "engine" else mpi
                    r.update(fn(algo, order, group, iters, run == 0))
                results[name].append(r)
                print(f"run {run} {name:16s} ({time.monotonic() - t1:5.1f} s) " +
                      " ".join(f"{b >> 10}K:{t * 1e3:.1f}" for b, (t, _) in sorted(r.items())),
                      flush=True)
            with open(os.path.join(out_dir, "results.json"), "w") as f:
                json.dump({"sizes": sizes, "results": results}, f)
        report(args, plan, sizes, results, out_dir)


def report(args, plan, sizes, results, out_dir):
    n = args.vms
    med = {name: {b: statistics.median(r[b][0] for r in rs if b in r) for b in sizes}
           for name, rs in results.items()}
    auto_algo = {}
    for b in sizes:
        algos = [r[b][1] for r in results.get("eng-auto-plan", []) if b in r]
        auto_algo[b] = "/".join(sorted(set(algos))) if algos else "?"
    ranges = plan.get("collectives", {}).get("allreduce", [])

    def planned(b):
        for rg in ranges:
            if b >= rg["min_bytes"] and (rg["max_bytes"] is None or b < rg["max_bytes"]):
                return rg
        return None

    def bound(b):  # a ring crossing each uplink once per direction: the slowest one bounds it
        return 2 * (n - 1) / n * b * 8 / (min(args.uplink_mbit) * 1e6)

    cols = list(results)
    print(f"\n{n} VMs / {args.racks} racks, seed {args.seed}, host "
          f"{lib.fmt_rates(args.host_mbit)}, uplink {lib.fmt_rates(args.uplink_mbit)} Mbit/s, "
          f"topology from {args.source}; medians of {args.runs} runs (ms); plan order {' '.join(plan['order'])}")
    print("| size | " + " | ".join(cols) + " | plan's choice | ring bound (ms) |")
    print("|---" * (len(cols) + 3) + "|")
    for b in sizes:
        rg = planned(b)
        cells = []
        for c in cols:
            v = med[c][b] * 1e3
            cells.append(f"{v:.1f}" + (f" ({auto_algo[b]})" if c == "eng-auto-plan" else ""))
        print(f"| {fmt_size(b)} | " + " | ".join(cells) +
              f" | {rg['algorithm'] if rg else '?'} | {bound(b) * 1e3:.1f} |")
    print()
    for b in sizes:
        eng = {c: med[c][b] for c in cols if c.startswith("eng-") and c.endswith("-plan")}
        mpi = {c: med[c][b] for c in cols if c.startswith("mpi-") and c.endswith("-plan")}
        if not eng or not mpi:
            continue
        best_e = min(eng, key=eng.get)
        best_m = min(mpi, key=mpi.get)
        auto = eng.get("eng-auto-plan")
        line = (f"{fmt_size(b):>7}: engine best {best_e} {eng[best_e] * 1e3:.1f} ms, Open MPI best "
                f"{best_m} {mpi[best_m] * 1e3:.1f} ms, ratio {mpi[best_m] / eng[best_e]:.2f}x")
        if auto is not None:
            line += (f"; auto ({auto_algo[b]}) {auto * 1e3:.1f} ms, "
                     f"{'>=' if auto <= mpi[best_m] else '<'} Open MPI ({mpi[best_m] / auto:.2f}x)")
        line += f"; bound {bound(b) * 1e3:.1f} ms: auto at {bound(b) / auto * 100:.0f}%" if auto else ""
        print(line)
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"sizes": sizes, "results": results, "medians": med}, f)


if __name__ == "__main__":
    main()
