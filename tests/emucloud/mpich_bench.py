#!/usr/bin/python3
"""MPICH's own allreduce on the emulated cloud, plain vs `rankmap run -- mpiexec.hydra` vs the
hand-ordered run (racks grouped, the plan's order as the hostfile): issue 19's Done-when.

Testbed: 8 VMs in 2 racks, host links 1000 Mbit/s, uplinks 250 Mbit/s, seed 25 (the provider's
order alternates the racks). The plan comes from truth.json. Each job: the C proof built against
MPICH, 16 MiB MPI_Allreduce (MPICH's default algorithm), --iters K after one warm-up, the median
of the slowest rank's times; RUNS jobs per variant, interleaved, and the median over the jobs.
Jobs run as in mpich_test.py (Hydra, UCX_TLS=tcp, the finalize workaround preloaded). Run as root:
  mpich_bench.py --emucloud tests/emucloud/emucloud --rankmap build/cli/rankmap \\
      --proof build/tests/emucloud/emucloud_mpi_proof_mpich \\
      --ucx-preload build/tests/emucloud/libemucloud_ucx_keep_endpoints.so [--runs 5 --iters 5]
"""

import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
import mpich_test as mt  # noqa: E402

kPrefix = "emchb"
kUpArgs = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
           "--seed", "25"]
kBytes = 16 << 20


def add_args(p):
    mt.add_args(p)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--iters", type=int, default=5)


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpiexec.hydra"))
    args.source = "truth"
    with lib.Testbed(args.emucloud, kPrefix, kUpArgs) as tb, \
            tempfile.TemporaryDirectory(prefix="rankmap-mpich-bench-") as tmp:
        os.chmod(tmp, 0o755)
        _, plan_path, plan, _ = al.plan_testbed(tb, args, tmp, lib.plan_calibration())
        bindir = lib.stand_in_mpirun(tmp, args.rankmap, plan_path, launcher="mpiexec.hydra")
        hand = os.path.join(tmp, "hosts-plan")
        with open(hand, "w") as f:
            f.write("".join(h + "\n" for h in plan["order"]))
        print(f"provider order: {' '.join(vm['name'] for vm in tb.truth['vms'])}")
        print(f"plan order:     {' '.join(plan['order'])}", flush=True)
        variants = {"plain": (None, None), "rankmap run": (bindir, None), "hand-ordered": (None, hand)}
        times = {k: [] for k in variants}
        uplink = {k: [] for k in variants}
        for run in range(args.runs):
            for name, (b, h) in variants.items():
                p, moved = mt.run_mpiexec(tb, args, b, h, [kBytes], args.iters, timeout=240)
                if p.returncode != 0:
                    lib.fail(f"{name} run {run}: exit {p.returncode}: {p.stderr[-1500:]}")
                m = re.search(r"time allreduce bytes=\d+ iters=\d+ median_s=([0-9.]+)", p.stdout)
                lib.check(m is not None, f"{name} run {run}: a time line")
                times[name].append(float(m.group(1)))
                uplink[name].append(moved)
                print(f"run {run} {name}: {float(m.group(1)):.3f} s, uplinks "
                      f"{moved / (1 << 20):.0f} MiB", flush=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        for k in variants:
            print(f"{k}: median {med[k]:.3f} s over {len(times[k])} jobs "
                  f"({', '.join(f'{t:.3f}' for t in times[k])}); uplink bytes per job median "
                  f"{statistics.median(uplink[k]) / (1 << 20):.0f} MiB")
        print(f"rankmap run vs hand-ordered: {med['rankmap run'] / med['hand-ordered']:.3f}; "
              f"plain / rankmap run: {med['plain'] / med['rankmap run']:.2f}x")


if __name__ == "__main__":
    main()
