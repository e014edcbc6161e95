#!/usr/bin/python3
"""emucloud heterogeneous links: `up --vms 6 --racks 3 --host-mbit 1000,400 --uplink-mbit
500,125,250` (host rates cycled over the VMs, uplink rates over the racks), checked against
truth.json:
  - truth.json records each VM's host rate (H[i % len]) and each rack's uplink (U[r % len]), and
    keeps the scalar host_mbit / uplink_mbit as the slowest of each;
  - the HTB classes configured on every host link (both ends) and every uplink (both directions)
    carry the truth's rate;
  - iperf3 TCP: one flow between every pair of racks (between their fastest VMs) reaches the
    narrowest link of its path (agents_lib.expected_mbps) within 10% (and not above it by more
    than 10%), and so does an in-rack flow whose receiver has a 400 Mbit/s host link.
With --repeat N each rate is the median of N measurements."""

import json
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agents_lib as al  # noqa: E402
import emucloud_testlib as lib  # noqa: E402

kPrefix = "eshapeh"
kHosts = [1000.0, 400.0]
kUplinks = [500.0, 125.0, 250.0]
kVms, kRacks = 6, 3
kTolerance = 0.10


def tc_rate_mbit(ns, dev, classid):
    """The rate of HTB class `classid` on `dev` in namespace `ns`, in Mbit/s (from `tc class
    show`: "class htb 1:1 root ... rate 125Mbit ceil ...")."""
    out = subprocess.run(["tc", "-n", ns, "class", "show", "dev", dev], capture_output=True,
                         text=True, check=True).stdout
    units = {"bit": 1e-6, "Kbit": 1e-3, "Mbit": 1.0, "Gbit": 1e3}
    for line in out.splitlines():
        m = re.match(rf"class htb {re.escape(classid)} .*? rate ([0-9.]+)(bit|Kbit|Mbit|Gbit) ",
                     line)
        if m:
            return float(m.group(1)) * units[m.group(2)]
    lib.fail(f"no HTB class {classid} with a rate on {dev} in {ns}: {out[:300]!r}")


def main():
    args = lib.parse_args(lambda p: p.add_argument("--repeat", type=int, default=1))
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "iperf3"))
    up_args = ["--vms", str(kVms), "--racks", str(kRacks), "--host-mbit",
               lib.fmt_rates(kHosts), "--uplink-mbit", lib.fmt_rates(kUplinks), "--seed", "5"]
    with lib.Testbed(args.emucloud, kPrefix, up_args) as tb:
        t = tb.truth
        vms = t["vms"]
        lib.check([v["host_mbit"] for v in vms] == [kHosts[i % len(kHosts)] for i in range(kVms)],
                  "truth.json: VM i has host rate H[i % len]")
        lib.check(t["uplink_mbit_by_rack"] == [kUplinks[r % len(kUplinks)] for r in range(kRacks)],
                  "truth.json: rack r has uplink U[r % len]")
        lib.check(t["host_mbit"] == min(kHosts) and t["uplink_mbit"] == min(kUplinks),
                  "truth.json: host_mbit and uplink_mbit are the slowest rates")

        # Configured rates: host links at both ends, uplinks in both directions.
        for i, vm in enumerate(vms):
            rack_ns = f"{kPrefix}emurack{vm['rack']}"
            for ns, dev in ((vm["name"], "eth0"), (rack_ns, f"v{i}")):
                got = tc_rate_mbit(ns, dev, "1:1")
                lib.check(abs(got - vm["host_mbit"]) < 1,
                          f"{ns} {dev}: HTB rate {got:g} = host rate {vm['host_mbit']:g}")
        for r in range(kRacks):
            for ns, dev in ((f"{kPrefix}emurack{r}", "uplink"), (f"{kPrefix}emuspine", f"r{r}")):
                got = tc_rate_mbit(ns, dev, "1:1")
                want = t["uplink_mbit_by_rack"][r]
                lib.check(abs(got - want) < 1, f"{ns} {dev}: HTB rate {got:g} = uplink {want:g}")

        # Measured rates: every pair of racks, between their fastest VMs, and one in-rack flow to
        # a slow host.
        racks = tb.racks()
        fastest = [max(r, key=lambda v: v["host_mbit"]) for r in racks]
        flows = [(fastest[a], fastest[b]) for a in range(kRacks) for b in range(kRacks) if a != b]
        slow = [(src, dst) for r in racks for src in r for dst in r
                if src is not dst and dst["host_mbit"] < src["host_mbit"]]
        if slow:
            flows.append(slow[0])
        for src, dst in flows:
            runs = [lib.iperf_clients(tb, [(src, dst)])[0] for _ in range(args.repeat)]
            got = lib.median(runs)
            want = al.expected_mbps(t, src["name"], dst["name"])
            print(f"{src['name']} (rack {src['rack']}) -> {dst['name']} (rack {dst['rack']}): "
                  f"{got:.1f} Mbit/s, expected {want:g} runs={[round(x, 1) for x in runs]}",
                  flush=True)
            lib.check(abs(got / want - 1) <= kTolerance,
                      f"{src['name']} -> {dst['name']}: {got:.1f} within {kTolerance:.0%} of "
                      f"{want:g}")
    print("PASS")


if __name__ == "__main__":
    main()
