#!/usr/bin/env python3
"""sanitizer_reports_fail_tests: a sanitizer report fails a test that passes on a line.

Usage: sanitizer_plant_test.py CTEST BINARY_DIR RANKMAP_SANITIZE

Runs each planted fault whose sanitizer this tree has (sanitizer_plant.cc) as the CTest test
sanitizer_plant_<fault>, through a nested `ctest` in BINARY_DIR (its own Testing/ directory),
and passes when CTest failed every one of them on the sanitizer's report although the output
also held the line the test passes on. Exits 77 (skipped) with the reason in a tree without a
sanitizer, where nothing would report the faults.
"""
import os
import re
import subprocess
import sys

# fault -> (the sanitizer in RANKMAP_SANITIZE that reports it, a line of its report)
FAULTS = {
    "leak": ("address", "ERROR: LeakSanitizer: detected memory leaks"),
    "use_after_free": ("address", "ERROR: AddressSanitizer: heap-use-after-free"),
    "ub": ("undefined", "runtime error: signed integer overflow"),
    "race": ("thread", "WARNING: ThreadSanitizer: data race"),
}
PASS_LINE = "Out of bounds values : 0 OK"


def main():
    ctest, binary_dir, sanitize = sys.argv[1], sys.argv[2], sys.argv[3]
    sanitizers = set(filter(None, sanitize.split(",")))
    faults = [f for f, (s, _) in FAULTS.items() if s in sanitizers]
    if not faults:
        print(f"skipped: no sanitizer for the planted faults in this tree "
              f"(RANKMAP_SANITIZE='{sanitize}'), so none would be reported; the ASan and TSan "
              f"trees of scripts/sanitize run this test")
        return 77
    env = dict(os.environ, RANKMAP_SANITIZER_PLANT="1")
    failures = []
    for fault in faults:
        name = f"sanitizer_plant_{fault}"
        run = subprocess.run([ctest, "--verbose", "-R", f"^{name}$"], cwd=binary_dir,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=100)
        out = run.stdout
        report = FAULTS[fault][1]
        verdict = re.search(rf"Test +#\d+: {name} \.*\s*\*\*\*Failed +Error regular expression "
                            rf"found in output", out)
        problems = []
        if run.returncode == 0 or not verdict:
            problems.append("CTest did not fail it on the sanitizer report")
        if PASS_LINE not in out:
            problems.append(f"its output lacks the line it passes on ({PASS_LINE!r})")
        if report not in out:
            problems.append(f"its output lacks the report {report!r}")
        status = "; ".join(problems) if problems else "failed on the report, as it must"
        print(f"{name}: {status}")
        if problems:
            failures.append(name)
            print(out)
    if failures:
        print(f"a sanitizer report did not fail: {', '.join(failures)}")
        return 1
    print(f"every planted fault failed its test: {', '.join(faults)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
