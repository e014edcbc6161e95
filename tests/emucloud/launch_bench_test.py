#!/usr/bin/python3
"""`rankmap bench` launched like nccl-tests on the emulated cloud: Open MPI's mpirun across an
8-VM testbed (2 racks, host links 1000 Mbit/s, uplinks 250 Mbit/s) with no RANKMAP_* variable
anywhere. The rendezvous goes through Open MPI's library, loaded at run time
(collectives/connect.h): rank 0 broadcasts its address with MPI_Bcast.

Checks:
  - exit 0 and every element right (--check: "Out of bounds values : 0 OK");
  - the bench header says the rank came from Open MPI and rank 0's address (VM 0's, not a
    loopback one) came by MPI_Bcast;
  - mpirun's --display-map puts rank i on VM i, 8 different VMs;
  - the bytes crossed the emulated links: the largest size's busbw stays under the host link
    rate (loopback moves gigabytes per second);
  - nothing is left behind: no namespace of this prefix, ip link as before the testbed, no
    `rankmap bench` process.
"""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import emucloud_testlib as lib  # noqa: E402

kPrefix = "launch"
kHostMbit = 1000
kUpArgs = ["--vms", "8", "--racks", "2", "--host-mbit", str(kHostMbit), "--uplink-mbit", "250",
           "--seed", "1"]
kRunTimeoutS = 150
# Two sizes, two timed iterations: what is checked is the launch, the rendezvous and that bytes
# cross the links, not the figure (1M-16M with 5 iterations took 23 s of the test's 32 s).
kBench = ["bench", "-b", "1M", "-e", "4M", "-f", "4", "-n", "2", "-w", "1", "--check"]
kNode = re.compile(r"Data for node: (\S+)")
kRank = re.compile(r"Process rank: (\d+)")
kHeader = re.compile(r"rank from Open MPI, root (\S+):(\d+) by MPI_Bcast")
# A result line: size count type redop root time algbw busbw #wrong algo.
kResult = re.compile(r"^\s*(\d+)\s+\d+\s+\S+\s+\S+\s+-?\d+\s+[0-9.]+\s+([0-9.]+)\s+([0-9.]+)\s+"
                     r"(\d+)", re.M)


def add_args(p):
    p.add_argument("--rankmap", required=True)


def rank_hosts(out):
    """{rank: node} from mpirun's --display-map."""
    hosts, node = {}, None
    for line in out.splitlines():
        if m := kNode.search(line):
            node = m.group(1)
        elif (m := kRank.search(line)) and node is not None:
            hosts[int(m.group(1))] = node
    return hosts


def bench_processes(rankmap):
    """Pids of processes running `RANKMAP bench` (the job's ranks), from /proc."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
        except OSError:
            continue
        if len(words) > 1 and words[0] == os.fsencode(rankmap) and words[1] == b"bench":
            out.append(int(pid))
    return out


def main():
    args = lib.parse_args(add_args)
    lib.require_environment(("ip", "tc", "ethtool", "unshare", "mpirun"))
    if not os.path.exists(args.rankmap):
        lib.skip(f"{args.rankmap} not built")
    tb = lib.Testbed(args.emucloud, kPrefix, kUpArgs)
    tb.down()  # a run killed by a timeout left its testbed: not part of "before"
    before = lib.snapshot()
    with tb:
        vms = [vm["name"] for vm in tb.truth["vms"]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
        argv = tb.cmd("mpirun", "--prefix", kPrefix, "--timeout", str(kRunTimeoutS), "--",
                      "--display-map", args.rankmap, *kBench)
        print("running: " + " ".join(argv), flush=True)
        p = subprocess.run(argv, capture_output=True, text=True, env=env,
                           timeout=kRunTimeoutS + 30)
        print(p.stdout, p.stderr[-3000:], sep="\n", flush=True)
        lib.check(p.returncode == 0, f"mpirun ... rankmap bench exits 0 (got {p.returncode})")
        lib.check("Out of bounds values : 0 OK" in p.stdout, "--check: 0 wrong elements")
        header = kHeader.search(p.stdout)
        lib.check(header is not None, "rank from Open MPI, rank 0's address by MPI_Bcast")
        lib.check(header.group(1) == tb.truth["vms"][0]["address"],
                  f"rank 0 listens on VM 0's address {header.group(1)}")
        hosts = rank_hosts(p.stdout)
        lib.check(hosts == {r: vms[r] for r in range(8)} and len(set(hosts.values())) == 8,
                  f"rank i on VM i, 8 different VMs ({hosts})")
        results = [(int(s), float(alg), float(bus), int(wrong))
                   for s, alg, bus, wrong in kResult.findall(p.stdout)]
        lib.check([r[0] for r in results] == [1 << 20, 4 << 20],
                  f"results for 1M and 4M ({results})")
        lib.check(all(r[3] == 0 for r in results), "0 wrong on every line")
        link_gbs = kHostMbit / 8 / 1000
        lib.check(0 < results[-1][2] <= link_gbs * 1.1,
                  f"4M busbw {results[-1][2]:.3f} GB/s within the host link's "
                  f"{link_gbs:.3f} GB/s: the bytes crossed the emulated links")
    # Other tests' testbeds may come and go meanwhile: only this prefix's namespaces count.
    ours = [n for n in lib.netns_names() if n.startswith(kPrefix)]
    lib.check(not ours and lib.link_names() == before["links"],
              f"no namespaces or links left behind ({ours})")
    left = bench_processes(args.rankmap)
    lib.check(not left, f"no rankmap bench process left ({left})")
    print("PASS")


if __name__ == "__main__":
    main()
