#!/usr/bin/python3
"""emucloud shaping, measured with iperf3 TCP inside the VMs (8 VMs, 2 racks, host links
1000 Mbit/s, uplinks 250 Mbit/s):
  - one in-rack flow reaches >= 90% of the host rate;
  - one cross-rack flow reaches >= 90% of the uplink rate;
  - four concurrent cross-rack flows (4 senders in rack A -> 4 receivers in rack B)
    each get within 20% of a quarter of the uplink.
With --repeat N each figure is the median of N measurements."""

import os
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "eshape"
kHost, kUplink = 1000, 250


def main():
    args = lib.parse_args(lambda p: p.add_argument("--repeat", type=int, default=1))
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "iperf3"))
    up_args = ["--vms", "8", "--racks", "2", "--host-mbit", str(kHost),
               "--uplink-mbit", str(kUplink), "--seed", "3"]
    with lib.Testbed(args.emucloud, kPrefix, up_args) as tb:
        a, b = tb.racks()
        in_rack, cross, four = [], [], []
        for _ in range(args.repeat):
            in_rack += lib.iperf_clients(tb, [(a[0], a[1])])
            cross += lib.iperf_clients(tb, [(a[0], b[0])])
            four.append(lib.iperf_clients(tb, list(zip(a[:4], b[:4]))))
        r_in, r_cross = lib.median(in_rack), lib.median(cross)
        # Per flow position, the median over repeats.
        r_four = [lib.median([run[k] for run in four]) for k in range(4)]
        print(f"in-rack   {a[0]['name']} -> {a[1]['name']}: {r_in:.1f} Mbit/s "
              f"({100 * r_in / kHost:.1f}% of {kHost}) runs={[round(x, 1) for x in in_rack]}")
        print(f"cross     {a[0]['name']} -> {b[0]['name']}: {r_cross:.1f} Mbit/s "
              f"({100 * r_cross / kUplink:.1f}% of {kUplink}) "
              f"runs={[round(x, 1) for x in cross]}")
        share = kUplink / 4
        print(f"4 flows   A -> B: {' '.join(f'{x:.1f}' for x in r_four)} Mbit/s "
              f"(share {share}; sum {sum(r_four):.1f}) "
              f"runs={[[round(x, 1) for x in run] for run in four]}", flush=True)
        lib.check(r_in >= 0.9 * kHost, f"in-rack {r_in:.1f} >= 90% of {kHost}")
        lib.check(r_cross >= 0.9 * kUplink, f"cross-rack {r_cross:.1f} >= 90% of {kUplink}")
        for k, x in enumerate(r_four):
            lib.check(abs(x - share) <= 0.2 * share,
                      f"flow {k}: {x:.1f} within 20% of {share}")
    print("PASS")


if __name__ == "__main__":
    main()
