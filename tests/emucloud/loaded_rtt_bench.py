#!/usr/bin/python3
"""loaded_rtt_bench: loaded round trips on the emulated cloud, against the simulator's queue model
(tests/sim/datacenter.h Datacenter::loadedRttUs), for docs/performance.md ("Simulator against
the emulated cloud"). A benchmark: it prints numbers, and fails only when a step fails.

Testbed `emucloud up --vms 8 --racks 2 --host-mbit H --uplink-mbit U --seed S`, agents in every
VM, then tests/bench/loaded_rtt_bench in rack A's first VM, twice:
  all:  every VM of rack A sends to one of rack B (rack A's uplink filled);
  half: half of rack A's VMs send.
Round trips while the flows run (the agents' own loaded round trips, taken by a sender), then
idle: from a sender to a rack-mate and to a VM of rack B.

With --cost K,... (e.g. --cost 2,31 --vms 32 --racks 4 --host-mbit 200 --uplink-mbit 50, the
32-VM probe test's testbed), what the round trips cost a trial instead (the simulator's
SimTiming): every VM sends to the VM at its place in the next rack, in trials without round
trips and with K per sender for each K, interleaved; the medians of each arm's wall times and
what each round trip adds between arms, and the CPU behind them: the coordinator's (the bench's
own process) and the agents' (every rankmapd process), per flow end and per round trip end (a
flow and a round trip each have two: sender and receiver, pinger and pinged), for the
simulator's model of agents on machines of their own (SimTiming).

Usage: loaded_rtt_bench.py --emucloud E --rankmapd D --bench LOADED_RTT_BENCH
       [--host-mbit 400 --uplink-mbit 100 --seed 11] [--trials 5] [--prefix lrtt] [--cost K,...]
"""

import json
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402


def main():
    def more(p):
        lib.add_testbed_args(p, vms=8, racks=2, seed=11, host_mbit="400", uplink_mbit="100")
        p.add_argument("--rankmapd", required=True)
        p.add_argument("--bench", required=True)
        p.add_argument("--trials", type=int, default=5)
        p.add_argument("--prefix", default="lrtt")
        p.add_argument("--cost", help="round trips per sender in each arm, e.g. 2,31")
    args = lib.parse_args(more)
    lib.require_environment()
    with lib.Testbed(args.emucloud, args.prefix, lib.up_args(args)) as tb:
        agents = al.Agents(tb, args.rankmapd, os.path.abspath(args.bench))
        agents.start()
        if args.cost:
            cost(tb, agents, args)
            agents.stop()
            print("DONE")
            return
        a, b = [[vm["name"] for vm in rack] for rack in tb.racks()]
        if len(a) < 4 or len(b) < 4:
            lib.fail(f"racks of {len(a)} and {len(b)} VMs: expected 4 or more each")
        cases = {
            "all": ([(a[i], b[i]) for i in range(4)],
                    [(a[0], a[1]), (a[0], b[1])]),
            "half": ([(a[0], b[0]), (a[1], b[1])],
                     [(a[0], a[2]), (a[0], b[2])]),
        }
        for name, (flows, pings) in cases.items():
            argv = tb.exec_argv(a[0], os.path.abspath(args.bench), "--hosts", agents.file("hosts"),
                                "--key", agents.file("probe.key"), "--trials", str(args.trials),
                                "--flows", ",".join(f"{x}>{y}" for x, y in flows),
                                "--pings", ",".join(f"{x}>{y}" for x, y in pings))
            p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                lib.fail(f"loaded_rtt_bench ({name}): exit {p.returncode}: {p.stderr.strip()}")
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"{name}: flows " + ", ".join(
                f"{f['from']}>{f['to']} {f['median_mbps']:.1f}" for f in r["flows"]) + " Mbit/s")
            for q in r["pings"]:
                where = "inside" if (q["from"] in a) == (q["to"] in a) else "across"
                print(f"  {q['from']}>{q['to']} ({where}): loaded {q['loaded_median_us']:.0f} us "
                      f"{[round(x) for x in q['loaded_us']]}, idle {q['idle_median_us']:.0f} us",
                      flush=True)
        agents.stop()
    print("DONE")


def cost(tb, agents, args):
    racks = [[vm["name"] for vm in rack] for rack in tb.racks()]
    flows = [(vm, racks[(r + 1) % len(racks)][i % len(racks[(r + 1) % len(racks)])])
             for r, rack in enumerate(racks) for i, vm in enumerate(rack)]
    argv = tb.exec_argv(racks[0][0], os.path.abspath(args.bench), "--hosts", agents.file("hosts"),
                        "--key", agents.file("probe.key"), "--trials", str(args.trials),
                        "--flows", ",".join(f"{x}>{y}" for x, y in flows), "--cost", args.cost)
    p = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        lib.fail(f"loaded_rtt_bench (cost): exit {p.returncode}: {p.stderr.strip()}")
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"cost: {len(flows)} flows, {args.trials} trials per arm, interleaved")
    base = r["arms"][0]
    for arm in r["arms"]:
        extra = ""
        if arm["pings"]:
            d = arm["trial_ms_median"] - base["trial_ms_median"]
            extra = f"; {d:+.0f} ms against none, {d / arm['pings']:.3f} ms per round trip"
        print(f"  {arm['pings_per_sender']} per sender ({arm['pings']} round trips): median "
              f"{arm['trial_ms_median']:.0f} ms {[round(x) for x in arm['trial_ms']]}{extra}")
    for lo, hi in zip(r["arms"][1:], r["arms"][2:]):
        d = hi["trial_ms_median"] - lo["trial_ms_median"]
        print(f"  {lo['pings']} -> {hi['pings']} round trips: {d:+.0f} ms, "
              f"{d / (hi['pings'] - lo['pings']):.3f} ms per round trip", flush=True)
    print("CPU, medians per trial (ms): coordinator, agents summed, busiest agent")
    for arm in r["arms"]:
        print(f"  {arm['pings_per_sender']} per sender: {arm['coordinator_cpu_ms_median']:.1f}, "
              f"{arm['agents_cpu_ms_median']:.1f} {[round(x) for x in arm['agents_cpu_ms']]}, "
              f"{arm['busiest_agent_cpu_ms_median']:.1f}")
    n = len(flows)
    print(f"  no round trips: agents {base['agents_cpu_ms_median'] / (2 * n):.3f} ms per flow "
          f"end, coordinator {base['coordinator_cpu_ms_median'] / n:.3f} ms per flow")
    for arm in r["arms"][1:]:
        da = arm["agents_cpu_ms_median"] - base["agents_cpu_ms_median"]
        dc = arm["coordinator_cpu_ms_median"] - base["coordinator_cpu_ms_median"]
        print(f"  {arm['pings']} round trips: agents {da / (2 * arm['pings']):.4f} ms per round "
              f"trip end, coordinator {dc / arm['pings']:.4f} ms per round trip", flush=True)


if __name__ == "__main__":
    main()
