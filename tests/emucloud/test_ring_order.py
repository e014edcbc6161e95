#!/usr/bin/python3
"""Rank order matters: Open MPI's ring allreduce (coll_tuned algorithm 4) of 16 MiB on 8
VMs in 2 racks (host 1000 Mbit/s, uplink 250 Mbit/s), run through `emucloud mpirun`:
  - grouped order (ranks sorted by rack, from truth.json): one ring flow per uplink
    direction;
  - alternating order (racks interleaved): every ring flow crosses racks, 4 per uplink
    direction, so each gets a quarter of the uplink.
The grouped order must be >= 2.5x faster (ideal 4x, expected about 3x)."""

import os
import re
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "ering"
kBytes = 16 << 20
kMinSpeedup = 2.5
kRunTimeoutS = 90


def add_args(p):
    p.add_argument("--bench", required=True, help="emucloud_allreduce_bench binary")
    p.add_argument("--runs", type=int, default=1, help="mpirun runs per order")
    p.add_argument("--iters", type=int, default=3, help="timed allreduces per run")


def run_order(tb, bench, hostfile, iters):
    argv = tb.cmd("mpirun", "--prefix", kPrefix, "--hostfile", hostfile, "--timeout",
                  str(kRunTimeoutS), "--",
                  "--mca", "coll_tuned_use_dynamic_rules", "1",
                  "--mca", "coll_tuned_allreduce_algorithm", "4",
                  bench, "--bytes", str(kBytes), "--iters", str(iters), "--warmup", "1")
    p = subprocess.run(argv, capture_output=True, text=True, timeout=kRunTimeoutS + 30)
    m = re.search(r"median_s=([0-9.]+)", p.stdout)
    if p.returncode != 0 or not m:
        lib.fail(f"mpirun exit {p.returncode}: {p.stdout.strip()} {p.stderr.strip()[-2000:]}")
    print("  " + p.stdout.strip().splitlines()[-1], flush=True)
    return float(m.group(1))


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    if not os.access(args.bench, os.X_OK):
        lib.skip(f"benchmark {args.bench} not built")
    up_args = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
               "--seed", "3"]
    with lib.Testbed(args.emucloud, kPrefix, up_args) as tb, \
            tempfile.TemporaryDirectory(prefix="emucloud-ring-") as tmp:
        racks = tb.racks()
        grouped = [vm["name"] for rack in racks for vm in rack]
        alternating = [rack[k]["name"] for k in range(max(map(len, racks)))
                       for rack in racks if k < len(rack)]
        times = {}
        for order, names in (("grouped", grouped), ("alternating", alternating)):
            hostfile = os.path.join(tmp, order)
            with open(hostfile, "w") as f:
                f.write("".join(n + "\n" for n in names))
            print(f"{order}: {' '.join(names)}", flush=True)
            times[order] = [run_order(tb, args.bench, hostfile, args.iters)
                            for _ in range(args.runs)]
        g, a = lib.median(times["grouped"]), lib.median(times["alternating"])
        speedup = a / g
        print(f"ring allreduce {kBytes >> 20} MiB, 8 ranks: grouped {g:.3f} s/op "
              f"{times['grouped']}, alternating {a:.3f} s/op {times['alternating']}, "
              f"speedup {speedup:.2f}x", flush=True)
        lib.check(speedup >= kMinSpeedup, f"grouped order {speedup:.2f}x faster "
                  f"(>= {kMinSpeedup}x)")
    print("PASS")


if __name__ == "__main__":
    main()
