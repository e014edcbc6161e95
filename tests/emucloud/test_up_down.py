#!/usr/bin/python3
"""emucloud up/down: up of 8 VMs in 2 racks is fast; truth.json and hosts agree; every VM
has its hostname and reaches every other VM and the head; exec passes the exit status
through; noise starts and stops; down leaves `ip netns list` and `ip link` as before and
is idempotent."""

import glob
import ipaddress
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "eupdown"
kVms, kRacks = 8, 2
# The target is < 5 s; the assertion leaves room for a loaded machine.
kUpLimitS = 10.0

# Run inside a VM: connect to every address given; print the ones that fail.
kConnectAll = r"""
import socket, sys
bad = []
for a in sys.argv[1:]:
    try:
        socket.create_connection((a, 7777), timeout=3).close()
    except OSError as e:
        bad.append(f"{a}:{e}")
print(" ".join(bad))
"""
kListen = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7777)); s.listen(64); print("listening", flush=True)
while True:
    s.accept()[0].close()
"""


def main():
    args = lib.parse_args()
    lib.require_environment()
    before = lib.snapshot()
    up_args = ["--vms", str(kVms), "--racks", str(kRacks), "--host-mbit", "1000",
               "--uplink-mbit", "250", "--seed", "3"]
    with lib.Testbed(args.emucloud, kPrefix, up_args) as tb:
        print(f"up --vms {kVms} --racks {kRacks}: {tb.up_seconds:.2f} s", flush=True)
        lib.check(tb.up_seconds < kUpLimitS, f"up took {tb.up_seconds:.2f} s < {kUpLimitS} s")
        t = tb.truth
        vms = t["vms"]
        subnet = ipaddress.ip_network(t["subnet"])
        lib.check(len(vms) == kVms and t["racks"] == kRacks and t["seed"] == 3 and
                  t["prefix"] == kPrefix and t["host_mbit"] == 1000 and
                  t["uplink_mbit"] == 250 and t["uplink_mbit_by_rack"] == [250] * kRacks and
                  all(v["host_mbit"] == 1000 for v in vms), "truth.json records the arguments")
        lib.check([v["name"] for v in vms] == [f"{kPrefix}vm{i}" for i in range(kVms)],
                  "VM names are PREFIXvm0..")
        addrs = [v["address"] for v in vms]
        lib.check(len(set(addrs)) == kVms and
                  all(ipaddress.ip_address(a) in subnet for a in addrs),
                  f"addresses unique and inside {subnet}")
        sizes = sorted(len(r) for r in tb.racks())
        lib.check(sizes[-1] - sizes[0] <= 1 and sum(sizes) == kVms,
                  f"racks balanced: sizes {sizes}")
        with open(os.path.join(tb.state_dir(), "hosts")) as f:
            hosts = [line.split() for line in f.read().splitlines() if line.strip()]
        lib.check(hosts == [[v["name"], v["address"]] for v in vms],
                  "hosts lists `name address` in truth.json order")
        st = tb.run("status", "--prefix", kPrefix)
        lib.check(not re.search(r"rack \d", st.stdout), "status hides racks without --truth")
        st = tb.run("status", "--prefix", kPrefix, "--truth")
        lib.check(len(re.findall(r"rack \d", st.stdout)) == kVms, "status --truth shows racks")

        for v in vms:
            p = subprocess.run(tb.exec_argv(v["name"], "hostname"), capture_output=True,
                               text=True, timeout=30)
            lib.check(p.stdout.strip() == v["name"], f"hostname in {v['name']}: "
                      f"{p.stdout.strip()!r}")
        p = subprocess.run(tb.exec_argv(vms[0]["name"], "sh", "-c", "exit 7"), timeout=30)
        lib.check(p.returncode == 7, f"exec passes the exit status through ({p.returncode})")

        listeners = [subprocess.Popen(tb.exec_argv(v["name"], "/usr/bin/python3", "-c",
                                                   kListen),
                                      stdout=subprocess.PIPE, text=True) for v in vms]
        try:
            for lp in listeners:
                lp.stdout.readline()
            head = t["head"]["name"]
            for src in [v["name"] for v in vms] + [head]:
                others = [a for v, a in zip(vms, addrs) if v["name"] != src]
                p = subprocess.run(["ip", "netns", "exec", src, "/usr/bin/python3", "-c",
                                    kConnectAll, *others], capture_output=True, text=True,
                                   timeout=60)
                lib.check(p.returncode == 0 and not p.stdout.strip(),
                          f"{src} reaches all VMs {p.stdout.strip()} {p.stderr.strip()}")
        finally:
            for lp in listeners:
                lp.terminate()
                lp.wait()

        if subprocess.run(["sh", "-c", "command -v iperf3"], capture_output=True).returncode \
                == 0:
            tb.run("noise", "start", "--prefix", kPrefix, "--from", vms[0]["name"],
                   "--to", vms[1]["name"], "--mbit", "10")
            st = tb.run("status", "--prefix", kPrefix).stdout
            lib.check("noise:" in st and "running" in st, "noise runs")
            tb.run("noise", "stop", "--prefix", kPrefix)
            st = tb.run("status", "--prefix", kPrefix).stdout
            lib.check("noise:" not in st, "noise stops")
            # The same pair again (same port, the same log appended to): this flow must reach
            # its server too, not pass on the first one's "listening" line and run without one.
            for _ in range(2):
                tb.run("noise", "start", "--prefix", kPrefix, "--from", vms[0]["name"], "--to",
                       "tenant", "--mbit", "10", "--udp")
                tb.run("noise", "stop", "--prefix", kPrefix)
            logs = glob.glob(os.path.join(tb.state_dir(), "services", "noise.*tenant*server.log"))
            accepted = sum(open(f).read().count("Accepted connection") for f in logs)
            lib.check(accepted == 2, f"both tenant flows on one pair reached their server "
                      f"({accepted} accepted in {logs})")
            # Left running on purpose: down must kill it.
            tb.run("noise", "start", "--prefix", kPrefix, "--from", vms[2]["name"],
                   "--to", vms[3]["name"], "--mbit", "10")

        p = tb.down()
        lib.check(p.returncode == 0, "down succeeds")
        after = lib.snapshot()
        ours = [ns for ns in after["netns"] if ns.startswith(kPrefix)]
        lib.check(not ours, f"no namespaces of ours left: {ours}")
        lib.check(after == before, "ip netns list and ip link as before")
        lib.check(not os.path.exists(tb.state_dir()), "state dir removed")
        p = tb.down()
        lib.check(p.returncode == 0 and lib.snapshot() == before, "down is idempotent")
    print("PASS")


if __name__ == "__main__":
    main()
