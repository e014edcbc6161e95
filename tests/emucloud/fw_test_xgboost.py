#!/usr/bin/python3
"""emucloud_fw_xgboost: distributed XGBoost (tree_method="hist") on 8 VMs in 2 racks (host 1000,
uplink 250 Mbit/s, seed 1), plain (xgboost's RabitTracker, ranks by worker IP: the provider's
order) and under `rankmap run --xgboost 8` (rankmap's tracker, ranks in plan order).

Which XGBoost: Debian's python3-xgboost (1.7.4, the Rabit protocol) by default; with
--xgboost-dir DIR the one scripts/build-xgboost built into DIR (3.x, the collective protocol:
its Python package through PYTHONPATH, for the plain run's tracker and every worker). An empty
DIR (CMake's RANKMAP_XGBOOST_DIR unset) or one without a finished build skips, with the reason
(emucloud_fw_xgboost_built).

Checks: same RMSE curve and bit-identical model; rankmap's tracker ranked the workers in plan
order; an allreduce of one histogram (above Rabit's 32768-element ring threshold) is at least
--min-speedup times faster; reports the training times. Bad input: a worker that cannot reach
the tracker gives the tracker's deadline error naming it, not a hang.

  fw_test_xgboost.py --emucloud PATH --rankmap BIN [--repeat R] [--min-speedup X] [--json OUT]
                     [--train-args "..."] [--xgboost-dir DIR]
"""

import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib  # noqa: E402
import emucloud_testlib as lib  # noqa: E402
import fw_lib  # noqa: E402

kHere = os.path.dirname(os.path.abspath(__file__))
kPrefix = "fwxgb"
kTrainArgs = "--rows 64 --features 1024 --max-bin 256 --rounds 3 --depth 4"


def extra(p):
    fw_lib.add_job_args(p)
    p.add_argument("--train-args", default=kTrainArgs)
    p.add_argument("--xgboost-dir", help="scripts/build-xgboost's output (default: Debian's)")


def choose_xgboost(xdir):
    """(environment words for the workers, PYTHONPATH entry, version) of the XGBoost to run."""
    if xdir is None:
        fw_lib.require_python_module("xgboost")
        p = subprocess.run(["/usr/bin/python3", "-c", "import xgboost; print(xgboost.__version__)"],
                           capture_output=True, text=True, timeout=120)
        return [], "", p.stdout.strip()
    if not xdir:
        lib.skip("no XGBoost build: run scripts/build-xgboost --out DIR and configure with "
                 "-DRANKMAP_XGBOOST_DIR=DIR")
    vfile = os.path.join(xdir, "VERSION")
    if not os.path.isfile(vfile):
        lib.skip(f"{xdir} has no VERSION: scripts/build-xgboost did not finish there")
    with open(vfile) as f:
        version = f.read().strip()
    pypath = os.path.join(xdir, "python")
    p = subprocess.run(["/usr/bin/python3", "-c", "import xgboost; print(xgboost.__version__)"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=pypath))
    if p.stdout.strip() != version:
        lib.fail(f"{pypath}: imports xgboost {p.stdout.strip()!r}, VERSION says {version!r}:\n"
                 f"{p.stderr[-800:]}")
    return [f"PYTHONPATH={pypath}"], pypath, version


def summary_of(name, p):
    s = fw_lib.json_lines(p.stdout, "summary")
    if p.returncode != 0 or not s:
        lib.fail(f"{name}: exit {p.returncode}, no summary:\n{p.stdout[-1500:]}\n"
                 f"{p.stderr[-2500:]}")
    return s[0]["summary"]


def head_argv(truth, argv):
    head = truth["head"]["name"]
    return ["ip", "netns", "exec", head, "unshare", "--uts", "sh", "-c",
            'hostname "$1" && shift && exec "$@"', "fw", head] + argv


def main():
    args = lib.parse_args(extra)
    lib.require_environment()
    envw, pypath, version = choose_xgboost(args.xgboost_dir)
    print(f"xgboost {version}" + (f" from {pypath}" if pypath else " (Debian)"), flush=True)
    work = tempfile.mkdtemp(prefix="fw_test_xgboost.")
    train = (["env"] + envw if envw else []) + \
        ["/usr/bin/python3", os.path.join(kHere, "fw_xgb_train.py")] + shlex.split(args.train_args)
    try:
        with lib.Testbed(args.emucloud, kPrefix, ["--vms", "8", "--racks", "2", "--host-mbit",
                                                   "1000", "--uplink-mbit", "250", "--seed",
                                                   "1"]) as tb:
            _, ppath, plan, _ = agents_lib.plan_testbed(tb, args, work)
            tpath = os.path.join(work, "topology.json")
            rsh = os.path.join(tb.state_dir(), "rsh-agent")
            plain, ours = [], []
            for r in range(args.repeat):
                p = subprocess.run(["/usr/bin/python3", os.path.join(kHere, "fw_xgb_plain.py"),
                                    "--emucloud", args.emucloud, "--prefix", kPrefix,
                                    "--timeout", "300", "--"] + train,
                                   capture_output=True, text=True, timeout=360,
                                   env=dict(os.environ, PYTHONPATH=":".join(
                                       x for x in (kHere, pypath) if x)))
                plain.append(summary_of(f"plain run {r}", p))
                p = subprocess.run(head_argv(tb.truth, [
                    args.rankmap, "run", "--xgboost", "8", "--plan", ppath, "--topology", tpath,
                    "--rsh", rsh, "--"] + train), capture_output=True, text=True, timeout=360)
                ours.append(summary_of(f"rankmap run {r}", p))
                if r == 0:
                    msg = next((l for l in p.stderr.splitlines()
                                if l.startswith("rankmap run: xgboost:")), "")
                    lib.check("ranked in plan order" in msg, msg[:200])
                    # Each worker logs its rank: 1.7 "task T got new rank R", 2.1+ "Task T got
                    # rank R". Task rankmap-R is the worker at plan position R.
                    got = dict(re.findall(r"[Tt]ask (rankmap-\d+) got (?:new )?rank (\d+)",
                                          p.stdout + p.stderr))
                    lib.check(len(got) == 8 and all(int(t.split("-")[1]) == int(r_)
                                                    for t, r_ in got.items()),
                              f"8 workers got the rank of their plan position from rankmap's "
                              f"tracker ({sorted(got.items())})")
                for name, s in (("plain", plain[-1]), ("rankmap run", ours[-1])):
                    lib.check(s.get("xgboost") == version,
                              f"{name} {r}: workers ran xgboost {s.get('xgboost')}")
            for r in range(args.repeat):
                lib.check(ours[r]["rmse"] == plain[0]["rmse"],
                          f"run {r}: RMSE curve identical ({plain[0]['rmse'][-1]!r} last)")
                lib.check(ours[r]["model_sha256"] == plain[0]["model_sha256"],
                          f"run {r}: model bit-identical (sha256 {plain[0]['model_sha256'][:16]})")
            tp = statistics.median(s["train_s"] for s in plain)
            tr = statistics.median(s["train_s"] for s in ours)
            ap = statistics.median(s["hist_allreduce_s"] for s in plain)
            ar = statistics.median(s["hist_allreduce_s"] for s in ours)
            print(f"training: provider order {tp:.2f} s, rankmap {tr:.2f} s ({tp / tr:.2f}x); "
                  f"one histogram allreduce ({plain[0]['hist_elements']} bins, "
                  f"{plain[0]['hist_elements'] * 16 / 2**20:.1f} MiB): {ap:.3f} s vs {ar:.3f} s "
                  f"({ap / ar:.2f}x; plan predicts {plan['predicted']['speedup']:.2f}x)", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"plain": plain, "rankmap": ours, "train_speedup": tp / tr,
                               "allreduce_speedup": ap / ar, "train_args": args.train_args,
                               "predicted": plan["predicted"]}, f, indent=1)
            lib.figure("fw_xgboost.histogram_allreduce_speedup", ap / ar, args.min_speedup)

            # Bad input: no VM can reach the tracker (a tracker address that is loopback in the
            # VMs): an error naming the workers, and nothing hangs.
            t0 = time.monotonic()
            p = subprocess.run(head_argv(tb.truth, [
                "env", "RANKMAP_XGBOOST_TIMEOUT=5s", args.rankmap, "run", "--xgboost", "8",
                "--plan", ppath, "--topology", tpath, "--rsh", rsh, "--tracker-addr",
                "127.0.0.1", "--"] + train), capture_output=True, text=True, timeout=120)
            dt = time.monotonic() - t0
            # Either the tracker's start deadline passes, or the workers give up connecting
            # first (xgboost retries, then exits non-zero) and rankmap run names the worker.
            named = ("timed out waiting for workers" in p.stderr and "without a rank" in p.stderr) \
                or "before the job ended" in p.stderr
            lib.check(p.returncode == 1 and named,
                      f"unreachable tracker: exit {p.returncode} with the deadline error "
                      f"({p.stderr.strip().splitlines()[-1][:160] if p.stderr.strip() else ''})")
            lib.check(dt < 60, f"... after {dt:.1f} s, not a hang")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("PASS", flush=True)


if __name__ == "__main__":
    main()
