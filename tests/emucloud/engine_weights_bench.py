#!/usr/bin/python3
"""engine_weights_bench: the plan's choice for an allreduce in the included engine against the
uniform algorithms on the emulated cloud of unequal racks behind unequal uplinks (issue 14: 10 VMs
in racks of 4, 3 and 3 behind 500, 125 and 250 Mbit/s uplinks, host links 1000), for
docs/performance.md ("Unequal racks"). A benchmark, not a test: it prints numbers and checks
only correctness.

Testbed: `emucloud up --vms 10 --racks 3 --host-mbit 1000 --uplink-mbit 500,125,250` (rack r gets
the r-th uplink; the emulated cloud deals VMs to racks round-robin over a seeded shuffle, so rack
0 has 4 VMs). topology.json from truth.json (--source truth, the default: the link model of the
configured rates) or from the agents' probe (--source probe). Two plans of the same topology:
`rankmap plan` (chunk weights where they make hier faster) and `rankmap plan --uniform-shares`
(none). Series, each `rankmap bench -b S -e S --algo A --plan P` on every VM launched in the
provider's order (the engine applies the plan's order), time = the slowest rank's mean per
iteration; the first run checks every element:

  auto     the plan's choice (weighted plan)
  hier-w   hier with the plan's chunk weights
  hier-u   hier with equal shares (uniform plan)
  ring, rhd, tree   in the plan's order (they use no weights)
  trees    packed trees, when the plan has them

Reported (medians over --runs; the series' order rotates between runs): each series, the plan's
choice against the best uniform algorithm (ring, rhd, tree, hier-u; target: >= 1.2x faster) and
against its prediction (the cost model's time of that algorithm at the size with the plan's
weights, as `rankmap plan` prints it; target: within 15%).

Needs the emulated cloud's per-rack uplinks (`--uplink-mbit U1,U2,...`) and the link-model
topology_from_truth (tests/emucloud/emucloud, agents_lib.py).

Usage: engine_weights_bench.py --emucloud E --rankmap R [--rankmapd D] [--runs 3]
       [--bytes 16M] [--iters 3] [--source truth|probe] [--out-dir DIR] [--prefix ewb]
Runs as root and holds the testbed for its whole duration (a few minutes for 3 runs).
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
from engine_table_bench import fmt_size, parse_size, run_engine  # noqa: E402

kUniform = ("ring", "rhd", "tree", "hier-u")


def add_args(p):
    p.add_argument("--rankmap", required=True)
    lib.add_testbed_args(p, vms=10, racks=3, seed=3, host_mbit="1000", uplink_mbit="500,125,250")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--bytes", default="16M")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    al.add_source_args(p)
    p.set_defaults(source="truth")
    p.add_argument("--port", type=int, default=29840, help="first RANKMAP_ROOT port")
    p.add_argument("--prefix", default="ewb")
    p.add_argument("--out-dir", default="", help="keep topology.json, the plans and results here")


def predictions(text):
    """{algorithm: seconds} from the summary line `allreduce 16 MiB predicted: ring 1.94 s; ...`."""
    m = re.search(r"allreduce [^:]* predicted:(.*)", text)
    if not m:
        lib.fail(f"rankmap plan printed no predictions: {text[-500:]}")
    out = {}
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    for item in m.group(1).split(";"):
        w = item.split()
        if len(w) == 3 and w[2] in scale:
            out[w[0]] = float(w[1]) * scale[w[2]]
    return out


def plan(args, tpath, ppath, extra):
    p = subprocess.run([args.rankmap, "plan", "--topology", tpath, "--out", ppath, "--use-groups",
                        *extra], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        lib.fail(f"rankmap plan {' '.join(extra)}: exit {p.returncode}: {p.stderr.strip()}")
    with open(ppath) as f:
        return json.load(f), predictions(p.stdout), p.stdout.strip()


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    size = parse_size(args.bytes)
    tb = lib.Testbed(args.emucloud, args.prefix, lib.up_args(args))
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-weights-bench-") as tmp:
        os.chmod(tmp, 0o755)
        out_dir = args.out_dir or tmp
        os.makedirs(out_dir, exist_ok=True)
        tpath, _, _, _ = al.plan_testbed(tb, args, out_dir)
        weighted_path = os.path.join(out_dir, "plan.json")
        uniform_path = os.path.join(out_dir, "plan-uniform.json")
        weighted, predicted, summary = plan(args, tpath, weighted_path, [])
        uniform, predicted_u, _ = plan(args, tpath, uniform_path, ["--uniform-shares"])
        print(summary, flush=True)
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        print(f"plan order {' '.join(weighted['order'])}, racks "
              f"{[rack[h] for h in weighted['order']]}, chunk weights {weighted['chunk_weights']}",
              flush=True)
        series = {"auto": ("auto", weighted_path), "hier-w": ("hier", weighted_path),
                  "hier-u": ("hier", uniform_path), "ring": ("ring", uniform_path),
                  "rhd": ("rhd", uniform_path), "tree": ("tree", uniform_path)}
        if weighted.get("trees"):
            series["trees"] = ("trees", weighted_path)
        names = list(series)
        results = {name: [] for name in names}
        ran = {}
        port = [args.port]
        for run in range(args.runs):
            k = run % len(names)
            for name in names[k:] + names[:k]:
                algo, ppath = series[name]
                port[0] += 1
                r = run_engine(tb, args.rankmap, args.prefix, port[0], algo, [size], 2,
                               args.iters, args.warmup, ppath, run == 0)
                t, which = r[size]
                results[name].append(t)
                ran[name] = which
                print(f"run {run} {name:7s} {t * 1e3:8.1f} ms ({which})", flush=True)
        med = {name: statistics.median(ts) for name, ts in results.items()}
        with open(os.path.join(out_dir, "results.json"), "w") as f:
            json.dump({"bytes": size, "results": results, "medians": med, "ran": ran,
                       "predicted": predicted, "predicted_uniform": predicted_u}, f, indent=1)
        report(args, size, med, ran, predicted, predicted_u)


def report(args, size, med, ran, predicted, predicted_u):
    def pred(name):
        if name == "hier-u":
            return predicted_u.get("hier")
        if name == "hier-w":
            return predicted.get("hier")
        if name == "auto":
            return predicted.get(ran["auto"])
        return predicted.get(name)

    print(f"\n{args.vms} VMs / {args.racks} racks, seed {args.seed}, host "
          f"{lib.fmt_rates(args.host_mbit)}, uplinks {lib.fmt_rates(args.uplink_mbit)} Mbit/s, "
          f"topology from {args.source}; allreduce {fmt_size(size)}, medians of {args.runs} runs")
    print("| series | algorithm | measured (ms) | predicted (ms) | measured / predicted |")
    print("|---|---|---|---|---|")
    for name, t in med.items():
        p = pred(name)
        print(f"| {name} | {ran[name]} | {t * 1e3:.1f} | "
              f"{'-' if p is None else f'{p * 1e3:.1f}'} | "
              f"{'-' if p is None else f'{t / p:.2f}'} |")
    best = min(kUniform, key=lambda n: med[n])
    auto = med["auto"]
    p = pred("auto")
    print(f"\nplan's choice ({ran['auto']}) {auto * 1e3:.1f} ms; best uniform {best} "
          f"{med[best] * 1e3:.1f} ms: {med[best] / auto:.2f}x (target >= 1.2x: "
          f"{'met' if med[best] / auto >= 1.2 else 'NOT met'}); prediction "
          f"{'-' if p is None else f'{p * 1e3:.1f} ms, measured/predicted {auto / p:.2f}'} "
          f"(target within 15%: "
          f"{'-' if p is None else ('met' if abs(auto / p - 1) <= 0.15 else 'NOT met')})")


if __name__ == "__main__":
    main()
