#!/usr/bin/python3
"""The MPI path on the emulated cloud: unmodified programs (C, Fortran `use mpi`, mpi4py) run
plain and under `rankmap run` in launch and shim modes.

Testbed: 8 VMs in 2 racks, host links 1000 Mbit/s, uplinks 250 Mbit/s, seed 25, whose provider
order alternates the racks (4 ring flows on every uplink direction). The plan comes from the
full pipeline: rankmapd agents in every VM, `rankmap probe` (topology.json), `rankmap plan`
(plan.json) -- or, with --source truth, from a topology written from truth.json (no probing).

Each program runs through `emucloud mpirun` (provider order, rmaps seq); under rankmap run, a
stand-in `mpirun` first on PATH calls `rankmap run --plan P --mode M -- /usr/bin/mpirun ...`, so
rankmap run sees exactly the command emucloud builds. Checks, for every program and mode:
  - results identical to the plain run (the programs' "check" lines, integer data);
  - ranks as planned: MPI_COMM_WORLD rank r runs on the plan's order[r] (the programs print
    their rank and hostname), and in shim mode the launcher's rank is unchanged;
  - one line from rankmap run (and in shim mode one from the shim) saying what was applied;
  - the timed allreduce (Open MPI's ring; 16 MiB for C, 4 MiB for the others) faster than plain,
    and the C program's speedup (median of its two modes) at least --min-speedup
    (docs/reliability.md, "Floors").
"""

import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kPrefix = "empi"
kUpArgs = ["--vms", "8", "--racks", "2", "--host-mbit", "1000", "--uplink-mbit", "250",
           "--seed", "25"]
kRunTimeoutS = 240
kRingMca = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]
kLine = re.compile(r"rank (\d+) of (\d+) on (\S+?) launcher (-?\d+)")


def add_args(p):
    p.add_argument("--rankmap", required=True)
    p.add_argument("--shim", required=True)
    p.add_argument("--proof-c", required=True)
    p.add_argument("--proof-f", default="")
    p.add_argument("--proof-py", required=True)
    al.add_source_args(p)
    p.add_argument("--bytes", type=int, default=16 << 20, help="the C program's allreduce")
    p.add_argument("--iters", type=int, default=2)
    p.add_argument("--other-bytes", type=int, default=4 << 20,
                   help="the Fortran and mpi4py programs' allreduce (1 timed call)")
    p.add_argument("--min-speedup", type=float, default=1.0,
                   help="floor for the C program's speedup (median of launch and shim mode)")


def check_agent_plan(tb, args, order):
    """rankmap run --agent against vm0's rankmapd (GET /v1/plan, with the agents' token): a dry
    run must put the hosts in the plan's order. (mpirun itself runs in the head namespace, where no agent listens.)"""
    vm0 = tb.truth["vms"][0]["name"]
    hosts = [vm["name"] for vm in tb.truth["vms"]]
    # The agent makes a plan it has not made yet only for a token holder (docs/reliability.md).
    token = os.path.join(tb.state_dir(), "agents", "token")
    p = subprocess.run(tb.exec_argv(vm0, "env", "RANKMAP_RUN_DIR=/tmp",
                                    f"RANKMAP_TOKEN_FILE={token}", args.rankmap, "run",
                                    "--dry-run", "--agent", "http://127.0.0.1:7410", "--",
                                    "mpirun", "-H", ",".join(hosts), "--mca", "rmaps", "seq",
                                    args.proof_c),
                       capture_output=True, text=True, timeout=120)
    lib.check(p.returncode == 0 and "launch mode" in p.stderr,
              f"rankmap run --agent: {p.stderr.strip()}")
    # The dry run prints the command, then each file it would write under a "# PATH" line: the
    # hostfile first (then the coll_tuned rules and the rules check's own hostfile).
    got = []
    for line in p.stdout.splitlines()[2:]:
        if line.startswith("#"):
            break
        if line in hosts:
            got.append(line)
    lib.check(got == order, f"rankmap run --agent puts the hosts in the plan's order ({' '.join(got)})")
    tb.run("agents", "stop", "--prefix", tb.prefix, timeout=60, check=False)


def parse_run(out):
    """(ranks: {rank: (host, launcher)}, check lines, allreduce median seconds or None)."""
    ranks, checks, median = {}, [], None
    # Lines of different ranks may still arrive glued together by the launcher's forwarding.
    for m in kLine.finditer(out):
        ranks[int(m.group(1))] = (m.group(3), int(m.group(4)))
    for line in out.splitlines():
        if line.startswith("check "):
            checks.append(line.strip())
        elif line.startswith("time allreduce"):
            median = float(re.search(r"median_s=([0-9.]+)", line).group(1))
    return ranks, checks, median


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    for f in (args.rankmap, args.shim, args.proof_c):
        if not os.path.exists(f):
            lib.skip(f"{f} not built")
    programs = [("c", [args.proof_c])]
    if args.proof_f and os.path.exists(args.proof_f):
        programs.append(("fortran", [args.proof_f]))
    else:
        print("note: no Fortran program (MPI Fortran not found at configure time)")
    if subprocess.run(["/usr/bin/python3", "-c", "import mpi4py"], capture_output=True).returncode == 0:
        programs.append(("mpi4py", ["/usr/bin/python3", args.proof_py]))
    else:
        print("note: python3-mpi4py not installed; the mpi4py program is left out")

    run_proof(lib.Testbed(args.emucloud, kPrefix, kUpArgs), args, programs)
    print("PASS")


def run_proof(tb, args, programs):
    with tb, tempfile.TemporaryDirectory(prefix="rankmap-mpi-path-") as tmp:
        os.chmod(tmp, 0o755)
        # With a probe the agents keep running for check_agent_plan, which stops them.
        _, plan_path, plan, _ = al.plan_testbed(tb, args, tmp, keep_running=True)
        rack = {vm["name"]: vm["rack"] for vm in tb.truth["vms"]}
        provider = [vm["name"] for vm in tb.truth["vms"]]
        print(f"provider order: {' '.join(provider)} racks {[rack[h] for h in provider]}")
        print(f"plan {plan['hash'][:19]} order: {' '.join(plan['order'])} racks "
              f"{[rack[h] for h in plan['order']]}; predicted {plan['predicted']['speedup']:.2f}x",
              flush=True)
        lib.check(plan["order"] != plan["hosts"], "the plan changes the provider order")
        if args.source == "probe":
            check_agent_plan(tb, args, plan["order"])

        # A stand-in mpirun, first on PATH in the head namespace: rankmap run wraps the real one.
        bindir = lib.stand_in_mpirun(tmp, args.rankmap, plan_path, '--mode "$RANKMAP_TEST_MODE"')
        rundir = os.path.join(tmp, "run")
        os.makedirs(rundir)
        os.chmod(rundir, 0o755)

        def run(name, words, mode):
            nbytes, iters = (args.bytes, args.iters) if name == "c" else (args.other_bytes, 1)
            env = dict(os.environ, RANKMAP_MPI_SHIM=args.shim, RANKMAP_RUN_DIR=rundir)
            for k in ("RANKMAP_PLAN", "RANKMAP_TOPOLOGY", "LD_PRELOAD"):
                env.pop(k, None)
            if mode != "plain":
                env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
                env["RANKMAP_TEST_MODE"] = mode
            argv = tb.cmd("mpirun", "--prefix", kPrefix, "--timeout", str(kRunTimeoutS), "--",
                          *kRingMca, *words, "--bytes", str(nbytes), "--iters",
                          str(iters), "--warmup", "1")
            p = subprocess.run(argv, capture_output=True, text=True, env=env,
                               timeout=kRunTimeoutS + 60)
            if p.returncode != 0:
                lib.fail(f"{mode} {' '.join(words)}: exit {p.returncode}: {p.stdout[-2000:]} "
                         f"{p.stderr[-3000:]}")
            return p

        speedups = []
        for name, words in programs:
            plain = run(name, words, "plain")
            pr, pchecks, ptime = parse_run(plain.stdout)
            lib.check(sorted(pr) == list(range(8)) and
                      all(pr[r][0] == provider[r] for r in range(8)),
                      f"{name} plain: rank r on provider host r")
            lib.check(len(pchecks) >= 4 and ptime, f"{name} plain: {len(pchecks)} checks, "
                      f"allreduce {ptime:.3f} s")
            for mode in ("launch", "shim"):
                p = run(name, words, mode)
                ranks, checks, t = parse_run(p.stdout)
                lib.check(checks == pchecks, f"{name} {mode}: results identical to plain")
                placed = sorted(ranks) == list(range(8)) and \
                    all(ranks[r][0] == plan["order"][r] for r in range(8))
                if not placed:
                    print(f"{name} {mode} stdout:\n{p.stdout[-4000:]}", flush=True)
                lib.check(sorted(ranks) == list(range(8)) and
                          all(ranks[r][0] == plan["order"][r] for r in range(8)),
                          f"{name} {mode}: MPI_COMM_WORLD rank r runs on plan order[r]"
                          f" (got {[ranks.get(r, ('?',))[0] for r in range(8)]})")
                if mode == "shim":
                    # The launcher kept the provider order; only MPI_COMM_WORLD changed.
                    lib.check(all(provider[ranks[r][1]] == ranks[r][0] for r in range(8)),
                              f"{name} shim: launcher ranks keep the provider order")
                    lib.check(p.stderr.count("MPI_COMM_WORLD reordered by plan") == 1,
                              f"{name} shim: one line from the shim")
                lib.check(p.stderr.count(f"rankmap run: {mode} mode: plan {plan['hash'][:19]}") == 1,
                          f"{name} {mode}: one line from rankmap run")
                if name == "c":
                    speedups.append(ptime / t)
                lib.check(t < ptime, f"{name} {mode}: allreduce "
                          f"{t:.3f} s vs plain {ptime:.3f} s ({ptime / t:.2f}x)")
        print(f"speedups: {' '.join(f'{s:.2f}' for s in speedups)}")
        lib.figure(f"mpi_path.ring_{args.bytes >> 20}MiB_speedup", lib.median(speedups),
                   args.min_speedup)
        lib.check(not os.listdir(rundir), "rankmap run removed its files")


if __name__ == "__main__":
    main()
