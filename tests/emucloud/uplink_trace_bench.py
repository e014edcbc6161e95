#!/usr/bin/python3
"""uplink_trace_bench: where an engine allreduce loses its time on the emulated cloud of unequal
racks (issue 14: 10 VMs in racks of 4+3+3 behind 500/125/250 Mbit/s uplinks). For each series
(hier-w: hier with the plan's chunk weights; hier-u: hier with equal shares; ring), one launch of
`rankmap bench` at 16 MiB in plan order (3 iterations) while every rack uplink's byte counter
(HTB root class, each direction) is sampled every 20 ms; prints the bytes each uplink carried,
the rate per 100 ms, the packets the testbed's queues dropped (`tc -s qdisc`, per namespace) and
the VMs' TCP retransmission timeouts and retransmitted segments (`nstat`). A diagnostic for
docs/performance.md, not a test.

Usage: uplink_trace_bench.py --emucloud E --rankmap R [--source truth] [--reps 2]
       [--algos hier-w,hier-u,ring] [--prefix diag] [--rto-min-ms MS]"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
from engine_table_bench import run_engine  # noqa: E402


def bytes_of(ns, dev):
    """Bytes the HTB root class of `dev` in namespace `ns` has sent."""
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "class", "show", "dev", dev],
                         capture_output=True, text=True).stdout
    m = re.search(r"class htb 1:1 root.*?Sent (\d+) bytes", out, re.S)
    if not m:
        lib.fail(f"{ns} {dev}: no HTB root class in `tc -s class show`")
    return int(m.group(1))


def drops(namespaces):
    """Packets dropped by every qdisc, per namespace."""
    tot = {}
    for ns in namespaces:
        out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "qdisc", "show"],
                             capture_output=True, text=True).stdout
        tot[ns] = sum(int(x) for x in re.findall(r"dropped (\d+)", out))
    return tot


def tcp_stats(vms):
    """TCP retransmission timeouts and retransmitted segments, summed over the VMs."""
    tot = {"TcpExtTCPTimeouts": 0, "TcpRetransSegs": 0}
    for vm in vms:
        out = subprocess.run(["ip", "netns", "exec", vm, "nstat", "-az", *tot],
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            w = line.split()
            if len(w) >= 2 and w[0] in tot:
                tot[w[0]] += int(w[1])
    return tot


def set_rto_min(vms, ms):
    """`ip route change ROUTE rto_min MS` for every route of every VM."""
    for vm in vms:
        routes = subprocess.run(["ip", "netns", "exec", vm, "ip", "route", "show"],
                                capture_output=True, text=True, check=True).stdout
        for route in routes.splitlines():
            subprocess.run(["ip", "netns", "exec", vm, "ip", "route", "change", *route.split(),
                            "rto_min", f"{ms}ms"], check=True)


def add_args(p):
    p.add_argument("--rankmap", required=True)
    lib.add_testbed_args(p, vms=10, racks=3, seed=3, host_mbit="1000", uplink_mbit="500,125,250")
    p.add_argument("--algos", default="hier-w,hier-u,ring")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--prefix", default="diag")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--rto-min-ms", type=int, default=0,
                   help="diagnostic: set rto_min on every VM's routes (0: the kernel's 200 ms), "
                        "to see what the retransmission timeouts cost")
    al.add_source_args(p)


def trace(tb, args, name, algo, plan_path, port):
    P = args.prefix
    devs = ([(f"out{r}", f"{P}emurack{r}", "uplink") for r in range(tb.truth["racks"])]
            + [(f"in{r}", f"{P}emuspine", f"r{r}") for r in range(tb.truth["racks"])])
    vms = [v["name"] for v in tb.truth["vms"]]
    namespaces = vms + [ns for _, ns, _ in devs[:len(devs) // 2]] + [f"{P}emuspine"]
    samples, stop = [], threading.Event()

    def sampler():
        while not stop.is_set():
            samples.append((time.monotonic(), [bytes_of(ns, d) for _, ns, d in devs]))
            time.sleep(0.02)

    d0, s0 = drops(namespaces), tcp_stats(vms)
    th = threading.Thread(target=sampler)
    th.start()
    try:
        r = run_engine(tb, args.rankmap, P, port, algo, [16 << 20], 2, 3, 0, plan_path)
    finally:
        stop.set()
        th.join()
    d1, s1 = drops(namespaces), tcp_stats(vms)
    t, which = r[16 << 20]
    print(f"== {name} ({which}) {t * 1e3:.0f} ms per iteration; MiB carried: "
          + " ".join(f"{devs[i][0]}={(samples[-1][1][i] - samples[0][1][i]) / 2**20:.1f}"
                     for i in range(len(devs))))
    print("   drops:", {k.replace(P, ""): d1[k] - d0[k] for k in namespaces if d1[k] != d0[k]},
          "tcp:", {k: s1[k] - s0[k] for k in s0})
    buckets = {}
    t0 = samples[0][0]
    for a, b in zip(samples, samples[1:]):
        dt = b[0] - a[0]
        rates = [(b[1][i] - a[1][i]) * 8 / dt / 1e6 for i in range(len(devs))]
        buckets.setdefault(int((b[0] - t0) * 10), []).append(rates)
    print("   t    " + " ".join(f"{d[0]:>5s}" for d in devs) + " (Mbit/s)")
    for k in sorted(buckets):
        vs = buckets[k]
        mean = [sum(x[i] for x in vs) / len(vs) for i in range(len(devs))]
        print(f"{k / 10:5.1f}s " + " ".join(f"{m:5.0f}" for m in mean))


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun", "nstat"))
    tb = lib.Testbed(args.emucloud, args.prefix, lib.up_args(args))
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-uplink-trace-") as tmp:
        os.chmod(tmp, 0o755)
        tpath, _, _, _ = al.plan_testbed(tb, args, tmp)
        if args.rto_min_ms:
            set_rto_min([v["name"] for v in tb.truth["vms"]], args.rto_min_ms)
        plans = {"w": os.path.join(tmp, "weighted.json"), "u": os.path.join(tmp, "uniform.json")}
        for key, extra in (("w", []), ("u", ["--uniform-shares"])):
            p = subprocess.run([args.rankmap, "plan", "--topology", tpath, "--out", plans[key],
                                "--use-groups", *extra], capture_output=True, text=True,
                               timeout=300)
            if p.returncode != 0:
                lib.fail(f"rankmap plan {' '.join(extra)}: exit {p.returncode}: {p.stderr}")
        with open(plans["w"]) as f:
            plan = json.load(f)
        rack = {v["name"]: v["rack"] for v in tb.truth["vms"]}
        print(f"plan order {' '.join(plan['order'])}, racks {[rack[h] for h in plan['order']]}, "
              f"chunk weights {plan.get('chunk_weights')}", flush=True)
        series = {"hier-w": ("hier", plans["w"]), "hier-u": ("hier", plans["u"]),
                  "ring": ("ring", plans["u"])}
        port = args.port
        for _ in range(args.reps):
            for name in args.algos.split(","):
                if name not in series:
                    lib.fail(f"--algos: {name!r}: expected some of {', '.join(series)}")
                port += 1
                trace(tb, args, name, *series[name], port)


if __name__ == "__main__":
    main()
