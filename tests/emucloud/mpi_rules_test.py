#!/usr/bin/python3
"""Open MPI's decision from the plan on the emulated cloud: `rankmap run -- mpirun` hands Open MPI
4.1 a coll_tuned rules file, and Open MPI runs the algorithms the rules name.

Testbed: 8 VMs in 2 racks, host links 1000 Mbit/s, uplinks 250 Mbit/s, seed 25 (the provider's
order alternates the racks). The plan comes from truth.json (`rankmap plan --use-groups`, with the
emulated cloud's calibration, emucloud_testlib.plan_calibration()). Every job runs through
`emucloud mpirun` with a stand-in `mpirun` first on PATH that calls `rankmap run --plan P
--rules-out R -- /usr/bin/mpirun ...` (RANKMAP_MPI_RULES=auto: the check that every host reads R
runs first). Checks:
  - rankmap run says it hands over the rules, and not that a host cannot read them;
  - MPI_Allreduce at 64 KiB and 1 MiB (and 16 MiB in the timed runs): every element right (the
    program aborts otherwise), the same result digests as a plain run;
  - Open MPI ran the rules' algorithm: the bytes through the uplinks during one 16 MiB allreduce
    match Open MPI forced to that algorithm (coll_tuned_allreduce_algorithm) in plan order
    within 10%, and differ from Open MPI's own choice there (Rabenseifner for 8 ranks) by more
    than 25% -- ring, Rabenseifner and recursive doubling move 1.75, 1 and 4 times the buffer
    over each uplink direction;
  - the same three 16 MiB runs timed: the rules' median call over the better of the two
    forced runs at most --max-over-best (docs/reliability.md, "Floors");
  - a user's --mca coll_tuned_* wins: rankmap run says so and adds no rules.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kPrefix = "erules"
kUpArgs = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
           "--seed", "25"]
kRunTimeoutS = 240
kSizes = [64 << 10, 1 << 20]  # and kFingerprintBytes, in the timed runs below
kFingerprintBytes = 16 << 20
kOpenMpiFixed = 6  # coll_tuned's fixed decision for 8-15 ranks, commutative op, >= 8 KiB
kTimedIters = 3


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--proof", required=True, help="emucloud_mpi_proof_c")
    p.add_argument("--max-over-best", type=float, default=1.5,
                   help="ceiling for the rules' 16 MiB time over the better of the two forced")


def seconds(out, nbytes):
    t = lib.allreduce_seconds(out, nbytes)
    if t is None:
        lib.fail(f"no time for {nbytes} bytes in the program's output: {out[-1000:]}")
    return t


def uplink_tx_bytes(tb):
    """Bytes sent so far through every uplink, both directions (rack -> spine, spine -> rack)."""
    total = 0
    spine = f"{tb.prefix}emuspine"
    devs = [(f"{tb.prefix}emurack{r}", "uplink") for r in range(tb.truth["racks"])]
    devs += [(spine, f"r{r}") for r in range(tb.truth["racks"])]
    for ns, dev in devs:
        p = subprocess.run(["ip", "netns", "exec", ns, "cat",
                            f"/sys/class/net/{dev}/statistics/tx_bytes"],
                           capture_output=True, text=True, timeout=30, check=True)
        total += int(p.stdout.strip())
    return total


def rules_algorithm(path, comm_size, nbytes):
    """The allreduce algorithm a coll_tuned rules file names for a communicator size and a
    message size, read as Open MPI 4.1 reads it (integers, '#' comments)."""
    with open(path) as f:
        nums = [int(x) for x in re.findall(r"-?\d+", re.sub(r"#[^\n]*", "", f.read()))]
    it = iter(nums)
    for _ in range(next(it)):
        coll, ncs = next(it), next(it)
        best = None
        for _ in range(ncs):
            size, nms = next(it), next(it)
            msgs = [(next(it), next(it), next(it), next(it)) for _ in range(nms)]
            if best is None or size <= comm_size:
                best = msgs
        if coll == 2:
            alg = best[0][1]
            for msg in best:
                if msg[0] <= nbytes:
                    alg = msg[1]
            return alg
    lib.fail(f"{path}: no allreduce rules")


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    for f in (args.rankmap, args.proof):
        if not os.path.exists(f):
            lib.skip(f"{f} not built")
    args.source = "truth"
    with lib.Testbed(args.emucloud, kPrefix, kUpArgs) as tb, \
            tempfile.TemporaryDirectory(prefix="rankmap-mpi-rules-") as tmp:
        os.chmod(tmp, 0o755)
        _, plan_path, plan, _ = al.plan_testbed(tb, args, tmp, lib.plan_calibration())
        lib.check("open_mpi" in plan and "allreduce" in plan["open_mpi"],
                  "the plan carries Open MPI's decision")
        print("plan's allreduce: " + "; ".join(
            f"{r['algorithm']} from {r['min_bytes']}" for r in plan["open_mpi"]["allreduce"]),
            flush=True)
        rules = os.path.join(tmp, "coll_tuned_rules.conf")
        bindir = lib.stand_in_mpirun(tmp, args.rankmap, plan_path,
                                     f"--rules-out {shlex.quote(rules)}")
        hostfile = os.path.join(tmp, "hosts-plan")
        with open(hostfile, "w") as f:
            f.write("".join(h + "\n" for h in plan["order"]))
        os.chmod(hostfile, 0o644)

        def run(words, rankmap, sizes, iters, warmup=1):
            env = dict(os.environ, RANKMAP_MPI_RULES="auto")
            for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD"):
                env.pop(k, None)
            extra = []
            if rankmap:
                env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
            else:
                extra = ["--hostfile", hostfile]  # plan order, no rankmap
            argv = tb.cmd("mpirun", "--prefix", kPrefix, *extra, "--timeout", str(kRunTimeoutS),
                          "--", *words, args.proof, "--bytes", ",".join(map(str, sizes)),
                          "--iters", str(iters), "--warmup", str(warmup))
            before = uplink_tx_bytes(tb)
            p = subprocess.run(argv, capture_output=True, text=True, env=env,
                               timeout=kRunTimeoutS + 60)
            moved = uplink_tx_bytes(tb) - before
            if p.returncode != 0:
                lib.fail(f"{'rankmap' if rankmap else 'plain'} {' '.join(words)}: exit "
                         f"{p.returncode}: {p.stdout[-2000:]} {p.stderr[-3000:]}")
            return p, moved

        def checks(out):
            return [line for line in out.splitlines() if line.startswith("check ")]

        # Correctness at a few sizes, with the rules.
        p, _ = run([], True, kSizes, 2)
        print(p.stderr.strip(), flush=True)
        lib.check("Open MPI's algorithms from the plan (coll_tuned rules" in p.stderr,
                  "rankmap run hands Open MPI the plan's rules")
        lib.check("not used" not in p.stderr, "every host reads the rules file (the check passed)")
        lib.check(os.path.exists(rules), f"--rules-out kept {rules}")
        plain, _ = run([], False, kSizes, 2)
        lib.check(checks(p.stdout) == checks(plain.stdout) and len(checks(p.stdout)) >= 4,
                  f"results identical to a plain run in plan order ({len(checks(p.stdout))} "
                  f"checks)")
        times = dict(re.findall(r"time allreduce bytes=(\d+) iters=\d+ median_s=([0-9.]+)",
                                p.stdout))
        print("with the rules: " + ", ".join(f"{int(b) >> 10} KiB {float(t) * 1e3:.1f} ms"
                                             for b, t in times.items()), flush=True)

        # Which algorithm ran: bytes through the uplinks during one allreduce.
        want = rules_algorithm(rules, 8, kFingerprintBytes)
        print(f"the rules name allreduce algorithm {want} at {kFingerprintBytes >> 20} MiB",
              flush=True)
        lib.check(want != kOpenMpiFixed, f"the rules choose another algorithm than Open MPI's "
                  f"own ({kOpenMpiFixed}) at {kFingerprintBytes >> 20} MiB, so the test can tell")
        forced = ["--mca", "coll_tuned_use_dynamic_rules", "1",
                  "--mca", "coll_tuned_allreduce_algorithm"]
        # Each run: one warm-up and kTimedIters timed calls, so the bytes compare per run.
        p_rules, by_rules = run([], True, [kFingerprintBytes], kTimedIters)
        p_forced, by_forced = run(forced + [str(want)], False, [kFingerprintBytes], kTimedIters)
        p_fixed, by_fixed = run([], False, [kFingerprintBytes], kTimedIters)
        mib = lambda b: b / (1 << 20)  # noqa: E731
        print(f"uplink bytes, {kTimedIters + 1} x {kFingerprintBytes >> 20} MiB allreduce: "
              f"rankmap run {mib(by_rules):.1f} MiB, forced {want} {mib(by_forced):.1f} MiB, "
              f"Open MPI's choice {mib(by_fixed):.1f} MiB", flush=True)
        t_rules, t_forced, t_fixed = (seconds(p.stdout, kFingerprintBytes)
                                      for p in (p_rules, p_forced, p_fixed))
        print(f"{kFingerprintBytes >> 20} MiB allreduce: rankmap run {t_rules:.3f} s, forced "
              f"{want} {t_forced:.3f} s, Open MPI's choice ({kOpenMpiFixed}) {t_fixed:.3f} s",
              flush=True)
        # The two algorithms timed are the rules' and Open MPI's own; at 16 MiB the others are
        # slower (docs/performance.md, "Open MPI's decision from the plan").
        lib.figure(f"mpi_rules.rules_over_best_{kFingerprintBytes >> 20}MiB",
                   t_rules / min(t_forced, t_fixed), args.max_over_best, lower_is_better=True)
        lib.check(abs(by_rules / by_forced - 1) <= 0.10,
                  f"rankmap run moved the bytes of algorithm {want} (within 10%)")
        lib.check(abs(by_rules / by_fixed - 1) > 0.25,
                  "and not those of Open MPI's own choice (more than 25% apart)")

        # The user's coll_tuned setting wins.
        p, _ = run(forced + ["4"], True, [1 << 20], 1)
        lib.check("your setting decides (--mca coll_tuned_use_dynamic_rules 1)" in p.stderr,
                  "a user's --mca coll_tuned_* wins, and rankmap run says so")
        lib.check("coll_tuned rules" not in p.stderr.split("\n")[0],
                  "no rules in the command")
    print("PASS")


if __name__ == "__main__":
    main()
