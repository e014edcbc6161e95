"""Runs an XGBoost job on an emucloud testbed the way dmlc-submit does, without rankmap: xgboost's
own Python RabitTracker (default sortby="host": ranks by worker IP string) in the head
namespace, and one worker per VM started with `emucloud exec`. The baseline of fw_test_xgboost.

  fw_xgb_plain.py --emucloud PATH --prefix P [--timeout S] -- PROGRAM...

Output: the tracker's and the workers' output on stdout. Exit: 0 when every worker exits 0,
else 1; 124 after --timeout (every process left in the VMs and head killed). /usr/bin/python3;
the tracker imports the xgboost that PYTHONPATH gives (1.7, or 2.1+), the workers the one their
PROGRAM does.
"""

import argparse
import json
import subprocess
import sys
import time

import fw_lib

# xgboost 1.x and 2.0: RabitTracker(host_ip, n_workers), start(n), .port, join(); 2.1+ (the C++
# tracker behind the same name): RabitTracker(n_workers, host_ip), start(), worker_args(),
# wait_for().
kTracker = r"""
import sys
from xgboost.tracker import RabitTracker
host, n = sys.argv[1], int(sys.argv[2])
if hasattr(RabitTracker, "worker_args"):
    t = RabitTracker(n_workers=n, host_ip=host)
    t.start()
    print("tracker-port", t.worker_args()["dmlc_tracker_port"], flush=True)
    t.wait_for()
else:
    t = RabitTracker(host_ip=host, n_workers=n)
    t.start(n)
    print("tracker-port", t.port, flush=True)
    t.join()
"""


def main(argv):
    p = argparse.ArgumentParser(prog="fw_xgb_plain")
    p.add_argument("--emucloud", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args(argv)
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    with open(f"/run/rankmap-emucloud-{a.prefix}/truth.json") as f:
        truth = json.load(f)
    head = truth["head"]
    n = len(truth["vms"])
    tracker = subprocess.Popen(["ip", "netns", "exec", head["name"], "/usr/bin/python3", "-c",
                                kTracker, head["address"], str(n)],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    workers = []
    rc = 0
    try:
        line = tracker.stdout.readline()
        if not line.startswith("tracker-port"):
            print(f"fw_xgb_plain: the tracker did not start: {line!r}", file=sys.stderr)
            return 1
        port = line.split()[1]
        for vm in truth["vms"]:
            workers.append(subprocess.Popen(
                [a.emucloud, "exec", "--prefix", a.prefix, vm["name"], "--", "env",
                 f"DMLC_TRACKER_URI={head['address']}", f"DMLC_TRACKER_PORT={port}",
                 f"DMLC_TASK_ID={vm['name']}"] + program,
                stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + a.timeout
        for w in workers:
            r = w.wait(timeout=max(0.1, deadline - time.monotonic()))
            rc = rc or r
        for line in tracker.stdout:
            sys.stdout.write(line)
        tracker.wait(timeout=30)
        return 1 if rc else 0
    except subprocess.TimeoutExpired:
        print(f"fw_xgb_plain: timed out after {a.timeout:g} s", file=sys.stderr)
        return 124
    finally:
        for proc in workers + [tracker]:
            if proc.poll() is None:
                fw_lib.kill_group(proc)
        if rc:
            fw_lib.kill_vm_processes(truth)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
