#!/usr/bin/python3
"""planner_seeds_bench: the planner on the testbed over many seeds, for docs/performance.md
("### Planner on the testbed"). A benchmark, not a CTest test: it prints one line per seed.

Per seed: `emucloud up` (--vms/--racks, host 1000, uplink 250 Mbit/s by default), rankmapd agents
in every VM, `rankmap probe` -> topology.json, `rankmap plan` -> plan.json; the adjusted Rand index
of the plan's innermost groups against truth.json's racks (1.0 = the same partition). With --mpi,
Open MPI's ring allreduce (coll_tuned algorithm 4, --bytes, default 16 MiB) runs in the provider's
order (truth.json's VM order, the hosts file) and in the plan's order, --runs times each
(interleaved, alternating which goes first), and the measured speedup (median provider time /
median plan time) is compared with plan["predicted"]["speedup"].

Usage: planner_seeds_bench.py --emucloud E --rankmapd D --rankmap R [--vms 8 --racks 2]
       [--seeds 1-20] [--mpi --bench emucloud_allreduce_bench [--runs 3 --iters 3]]
       [--keep DIR]   # topology/plan/truth of every seed, e.g. for regression fixtures
Exit status: 0 when every seed has ARI 1.0 (and, with --mpi, every prediction within
--tolerance of the measurement), 1 otherwise.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as tl  # noqa: E402

kRingMca = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]
kRunTimeoutS = 300


def extra(p):
    p.add_argument("--vms", type=int, default=8)
    p.add_argument("--racks", type=int, default=2)
    p.add_argument("--host-mbit", type=float, default=1000)
    p.add_argument("--uplink-mbit", type=float, default=250)
    p.add_argument("--seeds", default="1-20", help="e.g. 1-20 or 3,7,11")
    p.add_argument("--prefix", default="plseeds")
    p.add_argument("--mpi", action="store_true", help="also time Open MPI's ring in both orders")
    p.add_argument("--bench", default="", help="emucloud_allreduce_bench (with --mpi)")
    p.add_argument("--bytes", type=int, default=16 << 20)
    p.add_argument("--runs", type=int, default=3, help="mpirun runs per order")
    p.add_argument("--iters", type=int, default=3, help="timed allreduces per run")
    p.add_argument("--tolerance", type=float, default=0.15,
                   help="largest |predicted / measured - 1| counted as on target")
    p.add_argument("--keep", default="", help="copy topology/plan/truth of each seed here")


def parse_seeds(text):
    out = []
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part:
            out.append(int(part))
    return out


def adjusted_rand_index(a, b):
    """ARI of two labelings (lists of equal length; labels any hashable)."""
    n = len(a)
    if n < 2:
        return 1.0
    pairs = {}
    for x, y in zip(a, b):
        pairs[(x, y)] = pairs.get((x, y), 0) + 1
    rows, cols = {}, {}
    for (x, y), c in pairs.items():
        rows[x] = rows.get(x, 0) + c
        cols[y] = cols.get(y, 0) + c
    comb = lambda k: k * (k - 1) / 2  # noqa: E731
    index = sum(comb(c) for c in pairs.values())
    sa, sb = sum(comb(c) for c in rows.values()), sum(comb(c) for c in cols.values())
    expected = sa * sb / comb(n)
    top = (sa + sb) / 2
    if top == expected:  # both labelings trivial (all one group, or all singletons)
        return 1.0 if sorted(rows.values()) == sorted(cols.values()) else 0.0
    return (index - expected) / (top - expected)


def plan_labels(plan, names):
    """Innermost group of each host in `names` (-1 for all when the plan has no levels)."""
    levels = plan.get("groups") or []
    if not levels:
        return [0] * len(names)
    label = {}
    for g, members in enumerate(levels[0]["groups"]):
        for m in members:
            label[m] = g
    return [label.get(n, -1 - i) for i, n in enumerate(names)]


def crossings(order, rack):
    """Ring flows leaving each rack for a ring in `order`."""
    out = [0] * (max(rack.values()) + 1)
    for i, h in enumerate(order):
        if rack[h] != rack[order[(i + 1) % len(order)]]:
            out[rack[h]] += 1
    return out


def ring_time(tb, args, hostfile):
    argv = tb.cmd("mpirun", "--prefix", args.prefix, "--hostfile", hostfile, "--timeout",
                  str(kRunTimeoutS), "--", *kRingMca, args.bench, "--bytes", str(args.bytes),
                  "--iters", str(args.iters), "--warmup", "1")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=kRunTimeoutS + 60)
    m = re.search(r"median_s=([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        tl.fail(f"mpirun exit {p.returncode}: {p.stdout.strip()[-1000:]} {p.stderr.strip()[-2000:]}")
    return float(m.group(1))


def one_seed(args, seed, tmp):
    up = tl.up_args(args, seed)
    with tl.Testbed(args.emucloud, args.prefix, up) as tb:
        agents = al.Agents(tb, args.rankmapd, args.rankmap)
        agents.start()
        vm0 = tb.truth["vms"][0]["name"]
        topo_path = os.path.join(tmp, f"topology.{seed}.json")
        rc, probe_s, summary, err = agents.probe(vm0, out=topo_path)
        if rc != 0:
            tl.fail(f"seed {seed}: rankmap probe: exit {rc}: {err.strip()[-800:]}\n"
                    f"{agents.log_tail(vm0)}")
        agents.stop()  # nothing else may use the network while MPI is timed
        plan_path = os.path.join(tmp, f"plan.{seed}.json")
        p = subprocess.run([args.rankmap, "plan", "--topology", topo_path, "--out", plan_path],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            tl.fail(f"seed {seed}: rankmap plan: exit {p.returncode}: {p.stderr.strip()}")
        with open(plan_path) as f:
            plan = json.load(f)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            tag = f"{args.vms}vm{args.racks}r-seed{seed}"
            shutil.copy(topo_path, os.path.join(args.keep, f"topology.{tag}.json"))
            shutil.copy(plan_path, os.path.join(args.keep, f"plan.{tag}.json"))
            with open(os.path.join(args.keep, f"truth.{tag}.json"), "w") as f:
                json.dump(tb.truth, f, indent=1)

        names = [vm["name"] for vm in tb.truth["vms"]]  # the provider's order
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        ari = adjusted_rand_index(plan_labels(plan, names), [rack[n] for n in names])
        levels = plan.get("groups") or []
        ngroups = len(levels[0]["groups"]) if levels else 1
        pred = plan["predicted"]["speedup"]
        res = {"seed": seed, "ari": ari, "probe_s": probe_s, "groups": ngroups,
               "confidence": plan.get("confidence"), "predicted": pred,
               "provider_cross": crossings(names, rack),
               "plan_cross": crossings(plan["order"], rack)}
        line = (f"seed {seed:2d}: {args.vms} VMs/{args.racks} racks: probe {probe_s:5.1f} s, "
                f"ARI {ari:.3f} ({ngroups} groups, confidence {plan.get('confidence', 0):.2f}), "
                f"ring flows leaving each rack: provider {res['provider_cross']} plan "
                f"{res['plan_cross']}, predicted speedup {pred:.2f}x")
        if args.mpi:
            files = {}
            for order, hosts in (("provider", names), ("plan", plan["order"])):
                files[order] = os.path.join(tmp, f"hosts.{order}.{seed}")
                with open(files[order], "w") as f:
                    f.write("".join(h + "\n" for h in hosts))
            times = {"provider": [], "plan": []}
            for i in range(args.runs):
                for order in (("provider", "plan") if i % 2 == 0 else ("plan", "provider")):
                    times[order].append(ring_time(tb, args, files[order]))
            tp, tq = statistics.median(times["provider"]), statistics.median(times["plan"])
            measured = tp / tq
            res.update({"provider_s": times["provider"], "plan_s": times["plan"],
                        "measured": measured, "error": pred / measured - 1})
            line += (f"; ring {args.bytes >> 20} MiB: provider {tp:.3f} s {times['provider']}, "
                     f"plan {tq:.3f} s {times['plan']}, measured {measured:.2f}x, "
                     f"predicted/measured {pred / measured - 1:+.1%}")
        print(line, flush=True)
        return res


def main():
    args = al.parse_args(extra)
    tl.require_environment(("ip", "tc", "ethtool", "unshare") + (("mpirun",) if args.mpi else ()))
    if args.mpi and not os.access(args.bench, os.X_OK):
        tl.fail(f"--mpi needs --bench (emucloud_allreduce_bench): {args.bench!r}")
    seeds = parse_seeds(args.seeds)
    t0 = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="rankmap-plseeds-") as tmp:
        for seed in seeds:
            results.append(one_seed(args, seed, tmp))
    bad = [r["seed"] for r in results if r["ari"] < 1.0 - 1e-9]
    probe = [r["probe_s"] for r in results]
    print(f"summary: {args.vms} VMs/{args.racks} racks, seeds {args.seeds}: ARI 1.0 for "
          f"{len(results) - len(bad)} of {len(results)} seeds"
          + (f" (not: {bad})" if bad else "")
          + f"; probe wall median {statistics.median(probe):.1f} s (min {min(probe):.1f}, max "
          f"{max(probe):.1f}); {time.monotonic() - t0:.0f} s in all", flush=True)
    off = []
    if args.mpi:
        errs = [r["error"] for r in results]
        off = [r["seed"] for r in results if abs(r["error"]) > args.tolerance]
        print(f"summary: predicted vs measured ring speedup: errors "
              f"{' '.join(f'{e:+.1%}' for e in errs)}; worst {max(errs, key=abs):+.1%}; "
              f"{len(results) - len(off)} of {len(results)} within {args.tolerance:.0%}", flush=True)
    return 1 if bad or off else 0


if __name__ == "__main__":
    sys.exit(main())
