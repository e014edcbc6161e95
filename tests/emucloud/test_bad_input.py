#!/usr/bin/python3
"""emucloud up with impossible arguments: exit 2, a message naming the argument, and
`ip netns list` / `ip link` exactly as before (nothing created, nothing left behind)."""

import json
import os
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "ebad"


def expect_usage_error(tb, words, needle, before, user=None):
    argv = tb.cmd("up", *words)
    if user is not None:
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                "/usr/bin/python3", *argv]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    msg = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
    lib.check(p.returncode == 2, f"up {' '.join(words)}: exit 2 (got {p.returncode})")
    lib.check(needle in msg, f"  message names {needle!r}: {msg!r}")
    after = lib.snapshot()
    lib.check(after == before, "  ip netns list and ip link unchanged")
    lib.check(not os.path.exists(tb.state_dir()), "  no state dir left behind")


def main():
    args = lib.parse_args()
    lib.require_environment()
    rates = ["--host-mbit", "100", "--uplink-mbit", "50"]
    with lib.Testbed(args.emucloud, kPrefix) as tb:
        before = lib.snapshot()
        common = ["--prefix", kPrefix]
        cases = [
            (["--vms", "2", "--racks", "3", *rates], "--racks 3"),
            (["--vms", "0", "--racks", "1", *rates], "--vms 0"),
            (["--vms", "-3", "--racks", "1", *rates], "--vms -3"),
            (["--vms", "4", "--racks", "0", *rates], "--racks 0"),
            (["--vms", "4", "--racks", "-1", *rates], "--racks -1"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "0", "--uplink-mbit", "50"],
             "--host-mbit 0"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "-10", "--uplink-mbit", "50"],
             "--host-mbit -10"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "100", "--uplink-mbit", "0"],
             "--uplink-mbit 0"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "100", "--uplink-mbit", "-1"],
             "--uplink-mbit -1"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "100", "--uplink-mbit", "50,0"],
             "--uplink-mbit 50,0"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "100,x", "--uplink-mbit", "50"],
             "--host-mbit"),
            (["--vms", "4", "--racks", "2", "--host-mbit", "100", "--uplink-mbit", "50,60,70"],
             "--uplink-mbit 50,60,70"),
            (["--vms", "2", "--racks", "1", "--host-mbit", "1,2,3", "--uplink-mbit", "50"],
             "--host-mbit 1,2,3"),
            (["--vms", "4", "--racks", "2", "--rack-sizes", "3,2", *rates], "--rack-sizes 3,2"),
            (["--vms", "4", "--racks", "2", "--rack-sizes", "4", *rates], "--rack-sizes 4"),
            (["--vms", "4", "--racks", "2", "--rack-sizes", "4,0", *rates], "--rack-sizes"),
            (["--vms", "four", "--racks", "2", *rates], "--vms"),
            (["--vms", "4", "--racks", "2", "--prefix", "Bad/Name", *rates], "--prefix"),
        ]
        for words, needle in cases:
            expect_usage_error(tb, [*words, *common] if "--prefix" not in words else words,
                               needle, before)

        # Not root: run as nobody when the script is readable by it.
        if shutil.which("setpriv") and os.access(args.emucloud, os.R_OK) and \
                subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                "test", "-r", args.emucloud]).returncode == 0:
            expect_usage_error(tb, ["--vms", "4", "--racks", "2", *rates, *common], "root",
                               before, user=65534)
        else:
            print("note: not-root case skipped (script not readable by uid 65534)")

        # State dir in use: a second `up` on a testbed that is up.
        tb.run("up", "--vms", "2", "--racks", "1", *rates, *common)
        up_snapshot = lib.snapshot()
        p = tb.run("up", "--vms", "2", "--racks", "1", *rates, *common, check=False)
        lib.check(p.returncode == 2 and "--state" in p.stderr,
                  f"second up on the same state dir: exit 2 naming --state "
                  f"(got {p.returncode}: {p.stderr.strip()!r})")
        lib.check(lib.snapshot() == up_snapshot, "  running testbed untouched")
        # Same prefix, other state dir: the namespaces clash.
        other = tb.state_dir() + "-other"
        p = tb.run("up", "--vms", "2", "--racks", "1", *rates, *common, "--state", other,
                   check=False)
        lib.check(p.returncode == 2 and "--prefix" in p.stderr,
                  f"up with a prefix in use: exit 2 naming --prefix "
                  f"(got {p.returncode}: {p.stderr.strip()!r})")
        lib.check(not os.path.exists(other), "  no state dir left behind")
        lib.check(lib.snapshot() == up_snapshot, "  running testbed untouched")
        tb.down()
        lib.check(lib.snapshot() == before, "down restores ip netns list and ip link")
        # Racks of the sizes asked (the good case beside the refused ones above).
        tb.run("up", "--vms", "4", "--racks", "2", "--rack-sizes", "3,1", *rates, *common)
        with open(os.path.join(tb.state_dir(), "truth.json")) as f:
            racks = [v["rack"] for v in json.load(f)["vms"]]
        lib.check(sorted(racks) == [0, 0, 0, 1], f"--rack-sizes 3,1: racks {racks}")
        tb.down()
        lib.check(lib.snapshot() == before, "down restores ip netns list and ip link")
    print("PASS")


if __name__ == "__main__":
    main()
