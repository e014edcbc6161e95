#!/usr/bin/python3
"""emucloud migrate (a live migration): 6 VMs in 2 racks of 3, host links 400 Mbit/s, uplinks
100 Mbit/s. A VM moved to the other rack while a TCP flow from it runs:
  - the flow survives (same connection, exit 0) and speeds up from the uplink's rate to the host
    rate once its peer is a rack-mate;
  - afterwards its new rack-mates reach it at the host rate both ways and its old ones only
    through the uplinks;
  - both racks' uplink shapers hold one class per member; truth.json says the new rack;
  - `noise --to tenant` (another VM on the VM's host) loads that host link alone, in a class of
    its own that leaves the VM half the link and goes when the flow stops;
  - bad requests (same rack, no such rack, a rack's last VM) exit 2 naming what was expected."""

import json
import os
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "emig"
kHost, kUplink = 400, 100


def uplink_leaf_classes(tb, rack):
    """Per-VM leaf classes of the rack's uplink shaper (the default class 1:2 excluded)."""
    ns = f"{kPrefix}emurack{rack}"
    out = subprocess.run(["tc", "-n", ns, "class", "show", "dev", "uplink"], capture_output=True,
                         text=True, check=True).stdout
    return sum(1 for line in out.splitlines()
               if "parent 1:1 " in line and "class htb 1:2 " not in line)


def eth0_classes(tb, vm):
    """The HTB classes on a VM's eth0 (its host link out), sorted."""
    out = subprocess.run(tb.exec_argv(vm, "tc", "class", "show", "dev", "eth0"),
                         capture_output=True, text=True, check=True).stdout
    return sorted(line.split()[2] for line in out.splitlines() if line.startswith("class htb"))


def main():
    args = lib.parse_args()
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "iperf3", "bridge"))
    up_args = ["--vms", "6", "--racks", "2", "--host-mbit", str(kHost),
               "--uplink-mbit", str(kUplink), "--seed", "3"]
    with lib.Testbed(args.emucloud, kPrefix, up_args) as tb:
        a, b = tb.racks()
        m, mate, far, far2 = a[0], a[1], b[0], b[1]
        before_in = lib.iperf_clients(tb, [(m, mate)], seconds=2)[0]
        before_cross = lib.iperf_clients(tb, [(m, far)], seconds=2)[0]
        print(f"before: {m['name']} -> rack-mate {before_in:.1f}, -> other rack "
              f"{before_cross:.1f} Mbit/s", flush=True)
        lib.check(before_in >= 0.8 * kHost, f"in-rack {before_in:.1f} >= 80% of {kHost}")
        lib.check(before_cross <= 1.15 * kUplink, f"cross {before_cross:.1f} <= {kUplink} + 15%")

        # A flow from m to `far` runs for 6 s; m moves to far's rack 2 s in.
        server = lib.IperfServer(tb, far, 5301)
        try:
            flow = subprocess.Popen(
                tb.exec_argv(m["name"], "iperf3", "-c", far["address"], "-p", "5301", "-t", "6",
                             "-i", "0.5", "-J", "--connect-timeout", "3000"),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(2)
            t0 = time.monotonic()
            p = tb.run("migrate", "--prefix", kPrefix, m["name"], str(far["rack"]))
            print(p.stdout.strip(), f"(call {time.monotonic() - t0:.2f} s)", flush=True)
            out, err = flow.communicate(timeout=30)
        finally:
            server.stop()
        lib.check(flow.returncode == 0,
                  f"the flow across the migration ended cleanly (exit {flow.returncode}) "
                  f"{err.strip()[-200:]}")
        rates = [iv["sum"]["bits_per_second"] / 1e6 for iv in json.loads(out)["intervals"]]
        print("flow across the migration, Mbit/s per 0.5 s: "
              + " ".join(f"{r:.0f}" for r in rates), flush=True)
        early, late = lib.median(rates[1:3]), lib.median(rates[-3:])
        lib.check(early <= 1.15 * kUplink, f"before the move {early:.1f} <= {kUplink} + 15%")
        lib.check(late >= 0.8 * kHost, f"after the move {late:.1f} >= 80% of {kHost}")

        after_new = lib.iperf_clients(tb, [(m, far2)], seconds=2)[0]
        after_back = lib.iperf_clients(tb, [(far2, m)], seconds=2)[0]
        after_old = lib.iperf_clients(tb, [(m, mate)], seconds=2)[0]
        after_old_in = lib.iperf_clients(tb, [(mate, m)], seconds=2)[0]
        print(f"after: new rack-mate {after_new:.1f} / {after_back:.1f} (out/in), old rack-mate "
              f"{after_old:.1f} / {after_old_in:.1f} Mbit/s", flush=True)
        lib.check(min(after_new, after_back) >= 0.8 * kHost,
                  f"new rack-mates at the host rate both ways ({after_new:.1f}, {after_back:.1f})")
        lib.check(max(after_old, after_old_in) <= 1.15 * kUplink,
                  f"old rack-mates through the uplinks ({after_old:.1f}, {after_old_in:.1f})")

        with open(os.path.join(tb.state_dir(), "truth.json")) as f:
            truth = json.load(f)
        rec = next(v for v in truth["vms"] if v["name"] == m["name"])
        lib.check(rec["rack"] == far["rack"], f"truth.json: {m['name']} in rack {rec['rack']}")
        lib.check([(x["vm"], x["from_rack"], x["to_rack"]) for x in truth.get("migrations", [])]
                  == [(m["name"], m["rack"], far["rack"])], "truth.json lists the migration")
        classes = (uplink_leaf_classes(tb, m["rack"]), uplink_leaf_classes(tb, far["rack"]))
        lib.check(classes == (len(a) - 1, len(b) + 1),
                  f"uplink classes per rack {classes} = members ({len(a) - 1}, {len(b) + 1})")

        # Another tenant's flow out of m (`noise --to tenant`) loads m's host link alone: m's
        # flow to a rack-mate slows, two other rack-mates keep the host rate.
        tb.run("noise", "start", "--prefix", kPrefix, "--from", m["name"], "--to", "tenant",
               "--mbit", str(0.75 * kHost))
        try:
            shared = eth0_classes(tb, m["name"])
            time.sleep(1)
            loaded = lib.iperf_clients(tb, [(m, far2)], seconds=2)[0]
            others = lib.iperf_clients(tb, [(far, far2)], seconds=2)[0]
        finally:
            tb.run("noise", "stop", "--prefix", kPrefix, "--to", "tenant")
        alone = eth0_classes(tb, m["name"])
        print(f"tenant noise out of {m['name']}: its flow {loaded:.1f}, other rack-mates "
              f"{others:.1f} Mbit/s; eth0 classes {shared} while it ran, {alone} after",
              flush=True)
        lib.check(loaded < 0.8 * kHost, f"the loaded host link slows its flow ({loaded:.1f})")
        # The tenant (asking for 3/4 of the link) has a class of its own with half of it: the
        # VM's flow keeps the other half, not what a shared queue would leave it.
        lib.check(loaded >= 0.35 * kHost, f"the VM keeps about half its host link beside the "
                  f"tenant ({loaded:.1f})")
        lib.check(others >= 0.8 * kHost, f"other host links keep their rate ({others:.1f})")
        lib.check(shared == ["1:1", "1:2", "1:3"] and alone == ["1:1"],
                  f"the tenant's class exists while its flow runs ({shared}) and goes with it "
                  f"({alone})")

        # Bad requests: exit 2, naming what was expected.
        for words, want in ((["migrate", m["name"], str(far["rack"])], "already in rack"),
                            (["migrate", m["name"], "7"], "expected a rack number from 0 to 1"),
                            (["migrate", "nosuchvm", "0"], "not in this testbed")):
            p = tb.run(*words[:1], "--prefix", kPrefix, *words[1:], check=False)
            lib.check(p.returncode == 2 and want in p.stderr,
                      f"emucloud {' '.join(words)}: exit {p.returncode}, {p.stderr.strip()!r}")
        # Rack a keeps mate and a[2]; moving mate leaves one, which cannot move.
        tb.run("migrate", "--prefix", kPrefix, mate["name"], str(far["rack"]))
        p = tb.run("migrate", "--prefix", kPrefix, a[2]["name"], str(far["rack"]), check=False)
        lib.check(p.returncode == 2 and "the only VM of rack" in p.stderr,
                  f"a rack's last VM stays: exit {p.returncode}, {p.stderr.strip()!r}")
    left = [ns for ns in lib.netns_names() if ns.startswith(kPrefix)]
    lib.check(not left, f"no namespace left ({left})")
    print("PASS")


if __name__ == "__main__":
    main()
