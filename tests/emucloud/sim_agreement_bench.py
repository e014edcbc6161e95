#!/usr/bin/python3
"""sim_agreement_bench: the simulator (tests/sim) against the emulated cloud, on the probe's time
and on the 16 MiB ring allreduce time of the resulting plan, for docs/performance.md
("Simulator against the emulated cloud"). A benchmark: it prints numbers and ratios, and fails
only when a step fails.

Emulated cloud (testbed `emucloud up --vms N --racks R --host-mbit H --uplink-mbit U --seed S`):
agents in every VM and one `rankmap probe` round (wall time, and the round's own seconds and
bandwidth trials from the coordinating agent's log), then
`rankmap plan` on the topology it wrote, then the engine's ring allreduce of 16 MiB in the plan's
order (`rankmap bench --algo ring --plan plan.json`, launched as engine_table_bench.py launches
it: the slowest rank's mean over --iters iterations, --runs times, median).

Simulator (`probe_scale_bench --emucloud-shape N,R,H,U`): the same network as a tests/sim
Datacenter, with the testbed's rack of every VM and the agents' max_parallel_flows; the
production probe round on it (simulated seconds), the push of what it found to every agent
(agent::pushRoutes over the simulated links, and the CPU of storing a copy timed on this machine
for every agent, over this machine's cores), the plan from what it found, and that plan's
ring scored on the true network (reorder::predictedAllreduceUs, ring forced). It also scores the
testbed's own plan order, which separates the model's error from a difference between plans.

Usage: sim_agreement_bench.py --emucloud E --rankmap R --rankmapd D --sim PROBE_SCALE_BENCH
       [--vms 16 --racks 4 --host-mbit 1000 --uplink-mbit 250 --seed 7] [--iters 2] [--runs 1]
       [--prefix simc] [--json OUT]
Runs as root and holds the testbed for its whole duration (16 VMs: about 1 minute; 64 VMs at
100 / 25 Mbit/s: about 3 minutes, each 16 MiB ring there takes ~11 s); take the shared emucloud
lock around it where several people use the machine.
"""

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
from engine_table_bench import run_engine  # noqa: E402

kRingBytes = 16 << 20
kAgreement = 0.15  # the target: the simulator within 15% of the emulated cloud


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--rankmapd", required=True)
    p.add_argument("--sim", required=True, help="probe_scale_bench (tests/bench)")
    lib.add_testbed_args(p, vms=16, racks=4, seed=7)
    p.add_argument("--iters", type=int, default=2, help="timed ring iterations per run")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--runs", type=int, default=1, help="engine launches (median)")
    p.add_argument("--port", type=int, default=29700, help="first RANKMAP_ROOT port")
    p.add_argument("--prefix", default="simc")
    p.add_argument("--json", default="", help="also write the figures here")


def tcp_counters(tb):
    """TCP retransmitted segments and retransmission timeouts summed over every VM (each VM is
    its own network namespace, with its own /proc/net counters)."""
    total = {"RetransSegs": 0, "TCPTimeouts": 0}
    for vm in tb.truth["vms"]:
        p = subprocess.run(tb.exec_argv(vm["name"], "cat", "/proc/net/snmp", "/proc/net/netstat"),
                           capture_output=True, text=True, timeout=60)
        lines = p.stdout.splitlines()
        for head, vals in zip(lines[::2], lines[1::2]):
            for k, v in zip(head.split()[1:], vals.split()[1:]):
                if k in total:
                    total[k] += int(v)
    return total


def round_cost(agents, vm):
    """(bandwidth flows, trials, seconds) of the last round that the coordinating agent in `vm`
    logged ("probe round: ... N bandwidth flows in T trials, ... D dead, S s (status)"): the
    round alone, without the topology's push to the agents and the command's polling."""
    found = re.findall(r"(\d+) bandwidth flows in (\d+) trials.*? dead, ([0-9.]+) s \(",
                       agents.log_tail(vm, 400))
    if not found:
        lib.fail(f"no round summary in the log of the agent in {vm}")
    return int(found[-1][0]), int(found[-1][1]), float(found[-1][2])


def link_medians(topo):
    """Median stated host link and first-level uplink rates of a topology's link model (both
    directions pooled; statistics.median_low: the nearest rank, as the simulator's side takes)."""
    links = topo.get("links") or {}
    hosts = [v for link in links.get("hosts", []) for v in (link["out_mbps"], link["in_mbps"])]
    ups = [v for link in (links.get("uplinks") or [[]])[0]
           for v in (link["out_mbps"], link["in_mbps"])]
    return (statistics.median_low(hosts) if hosts else 0.0,
            statistics.median_low(ups) if ups else 0.0)


def simulate(args, truth, max_flows, order):
    """The simulator's side: probe_scale_bench --emucloud-shape ... --json, parsed."""
    index = {vm["name"]: i for i, vm in enumerate(truth["vms"])}
    argv = [args.sim, "--emucloud-shape",
            f"{args.vms},{args.racks},{args.host_mbit[0]:g},{args.uplink_mbit[0]:g}",
            "--rack-of", ",".join(str(vm["rack"]) for vm in truth["vms"]),
            "--max-flows", str(max_flows), "--order", ",".join(str(index[h]) for h in order),
            "--seed", str(args.seed), "--agent-cores", str(os.cpu_count() or 1), "--json"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        lib.fail(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    args = lib.parse_args(add_args)
    if len(args.host_mbit) > 1 or len(args.uplink_mbit) > 1:
        lib.fail("--host-mbit, --uplink-mbit: expected one rate each (the simulator's "
                 "--emucloud-shape takes uniform links)")
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    args.source = "probe"
    with lib.Testbed(args.emucloud, args.prefix, lib.up_args(args)) as tb, \
            tempfile.TemporaryDirectory(prefix="rankmap-sim-agreement-") as tmp:
        os.chmod(tmp, 0o755)
        # Agents stopped after the probe: their periodic re-probes would compete with the ring.
        topo_path, plan_path, plan, agents = al.plan_testbed(tb, args, tmp)
        with open(topo_path) as f:
            host_rate, uplink_rate = link_medians(json.load(f))
        wall = agents.last_probe_s
        flows, trials, round_s = round_cost(agents, tb.truth["vms"][0]["name"])
        with open(agents.file("rankmapd.json")) as f:
            max_flows = json.load(f)["probe"]["max_parallel_flows"]
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        print(f"plan order {' '.join(plan['order'])}, racks {[rack[h] for h in plan['order']]}",
              flush=True)
        rings = []
        for run in range(args.runs):
            before = tcp_counters(tb)
            r = run_engine(tb, args.rankmap, args.prefix, args.port + run, "ring", [kRingBytes],
                           4, args.iters, args.warmup, plan_path, check=run == 0)
            after = tcp_counters(tb)
            rings.append(r[kRingBytes][0])
            print(f"run {run}: engine ring 16 MiB, plan order: {rings[-1] * 1e3:.1f} ms; "
                  f"{args.warmup + args.iters} iterations: " +
                  ", ".join(f"{k} {after[k] - before[k]}" for k in after), flush=True)
        sim = simulate(args, tb.truth, max_flows, plan["order"])
    emu_ring_ms = statistics.median(rings) * 1e3
    bound_ms = 2 * (args.vms - 1) / args.vms * kRingBytes * 8 / (args.uplink_mbit[0] * 1e6) * 1e3
    rows = [
        ("probe, bandwidth trials", trials, sim["trials"]),
        ("probe, bandwidth flows", flows, sim["bandwidth_flows"]),
        ("probe, host links stated (median Mbit/s)", host_rate, sim["host_mbps_median"]),
        ("probe, rack uplinks stated (median Mbit/s)", uplink_rate, sim["uplink_mbps_median"]),
        ("probe, the round (s)", round_s, sim["probe_s"]),
        ("probe, wall of `rankmap probe` (s): round + push", wall,
         sim["probe_s"] + sim["push_s"]),
        ("16 MiB ring, testbed's plan order (ms)", emu_ring_ms, sim["ring_order_ms"]),
        ("16 MiB ring, simulator's own plan (ms)", emu_ring_ms, sim["ring_plan_ms"]),
    ]
    print(f"\n{args.vms} VMs / {args.racks} racks, host {args.host_mbit[0]:g} / uplink "
          f"{args.uplink_mbit[0]:g} Mbit/s, seed {args.seed}, max_parallel_flows {max_flows}; "
          f"engine: median of {args.runs} run(s) of {args.iters} iteration(s); ring bound "
          f"2(n-1)/n S / uplink = {bound_ms:.1f} ms; simulator: {sim['trials']} trials, "
          f"{sim['bandwidth_flows']} flows, structure {sim['structure']}, rack ARI "
          f"{sim['rack_ari']:.3f}")
    print("| quantity | emulated cloud | simulator | simulator / emulated | within 15% |")
    print("|---|---|---|---|---|")
    for name, emu, s in rows:
        ratio = s / emu if emu > 0 else float("nan")
        print(f"| {name} | {emu:.1f} | {s:.1f} | {ratio:.3f} | "
              f"{'yes' if abs(ratio - 1) <= kAgreement else 'no'} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vms": args.vms, "racks": args.racks, "host_mbit": args.host_mbit[0],
                       "uplink_mbit": args.uplink_mbit[0], "seed": args.seed,
                       "probe_wall_s": wall, "probe_round_s": round_s,
                       "probe_trials": trials, "probe_flows": flows,
                       "host_mbps_median": host_rate, "uplink_mbps_median": uplink_rate, "ring_ms":
                       [t * 1e3 for t in rings], "ring_median_ms": emu_ring_ms,
                       "ring_bound_ms": bound_ms, "plan_order": plan["order"], "sim": sim}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
