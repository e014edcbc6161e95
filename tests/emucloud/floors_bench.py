#!/usr/bin/python3
"""The distributions behind the emucloud tests' floors (docs/reliability.md, "Floors").

Runs the named CTest tests of a build tree round after round (one test at a time, the order
rotated each round), collects the `figure NAME VALUE` lines that emucloud_testlib.figure()
prints, and reports per figure: runs, median, min, max, and the window a floor must fall in to
pass every healthy run here and fail a 25% regression of the median (for a figure where higher
is better: above 0.75 x median and at most the lowest run; lower is better: below 1.25 x median
and at least the highest run). An empty window means the test's figure is too noisy for such a
floor, which is a finding, not a reason to widen it.

  tests/emucloud/floors_bench.py --build build --runs 10 --out floors.jsonl \\
      emucloud_mpi_path emucloud_mpi_rules emucloud_mpich ...

Root, nothing else running (the tests measure what two cores carry).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

kFigure = re.compile(r"^(?:\d+: )?figure (\S+) (\S+)$", re.M)
kRegression = 0.25


def run_test(build, name, timeout, log=None):
    t0 = time.time()
    p = subprocess.run(["ctest", "--test-dir", build, "-R", f"^{name}$", "-V", "--timeout",
                        str(timeout)], capture_output=True, text=True, timeout=timeout + 60)
    if log:
        with open(log, "w") as f:
            f.write(p.stdout + p.stderr)
    figures = {k: float(v) for k, v in kFigure.findall(p.stdout)}
    failed = [line.split("FAIL: ", 1)[1] for line in p.stdout.splitlines() if "FAIL: " in line]
    return {"test": name, "rc": p.returncode, "seconds": round(time.time() - t0, 1),
            "figures": figures, "failed": failed[:1]}


def summarize(records, lower_is_better):
    by = {}
    for r in records:
        for k, v in r["figures"].items():
            by.setdefault(k, []).append(v)
    print("| figure | runs | median | min | max | window for the floor |")
    print("|---|---|---|---|---|---|")
    for k in sorted(by):
        xs = by[k]
        med = statistics.median(xs)
        if any(re.search(p, k) for p in lower_is_better):
            lo, hi = max(xs), med * (1 + kRegression)
            window = f"[{lo:.3g}, {hi:.3g})" if lo < hi else f"none ({lo:.3g} >= {hi:.3g})"
        else:
            lo, hi = med * (1 - kRegression), min(xs)
            window = f"({lo:.3g}, {hi:.3g}]" if lo < hi else f"none ({lo:.3g} >= {hi:.3g})"
        print(f"| {k} | {len(xs)} | {med:.3g} | {min(xs):.3g} | {max(xs):.3g} | {window} |")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--timeout", type=int, default=1200, help="seconds per test run")
    p.add_argument("--out", help="append one JSON line per test run here")
    p.add_argument("--log-dir", help="keep each run's whole output here (TEST-ROUND.log)")
    p.add_argument("--first-round", type=int, default=0, help="continue an earlier --out")
    p.add_argument("--summary", help="only summarize this --out file")
    p.add_argument("--lower-is-better", action="append",
                   default=["seconds$", "error$", "over_best"],
                   help="regex of figure names where lower is better")
    p.add_argument("tests", nargs="*")
    args = p.parse_args()
    if args.summary:
        with open(args.summary) as f:
            summarize([json.loads(line) for line in f if line.strip()], args.lower_is_better)
        return 0
    if not args.tests:
        p.error("name at least one test")
    records = []
    if args.log_dir:
        os.makedirs(args.log_dir, exist_ok=True)
    for i in range(args.first_round, args.runs):
        k = i % len(args.tests)
        for name in args.tests[k:] + args.tests[:k]:
            log = os.path.join(args.log_dir, f"{name}-{i}.log") if args.log_dir else None
            r = run_test(args.build, name, args.timeout, log)
            r["round"] = i
            records.append(r)
            print(json.dumps(r), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
    summarize(records, args.lower_is_better)
    return 0


if __name__ == "__main__":
    sys.exit(main())
