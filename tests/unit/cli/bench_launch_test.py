#!/usr/bin/python3
"""`rankmap bench` launched like nccl-tests, on loopback, with no RANKMAP_* variable (label unit).

  bench_launch_test.py RANKMAP

- Open MPI: `mpirun -np 3 rankmap bench --check`: the rendezvous goes through Open MPI's library
  (loaded at run time); 0 wrong elements, exit 0, rank 0 logs the rendezvous on stderr.
- The same with RANKMAP_MPI_LIBRARY naming a missing library, and with rank 0 unable to listen
  (RANKMAP_SOCKET_IFNAME naming no interface): every rank exits with an error naming the cause
  (no rank waits for a peer), and mpirun exits non-zero.
- torchrun (python3-torch): `torchrun --nproc_per_node 3 --no_python rankmap bench --check`:
  rank 0 listens on MASTER_PORT+1 while torchrun's agent store holds MASTER_PORT.
Skips (77) without mpirun; the torchrun part is skipped without torch. Exit 0 = pass.
"""
import importlib.util
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile

rankmap = sys.argv[1]
failures = []


def check(cond, msg):
    print(("ok: " if cond else "FAIL: ") + msg, flush=True)
    if not cond:
        failures.append(msg)


def clean_env(home):
    """This environment without any RANKMAP_* variable, HOME without a ~/.rankmap.conf, TMPDIR
    the test's folder (torchrun leaves a torchelastic_* log folder there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RANKMAP_")}
    env["HOME"] = home
    env["TMPDIR"] = home
    return env


def free_port():
    """A port with its successor free too (rank 0 listens on MASTER_PORT+1), below the kernel's
    ephemeral range: a port bind(0) hands out is one that any parallel test's outgoing
    connection may take between this check and torchrun's bind (seen in CI: "Address already in
    use" on MASTER_PORT+1)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random(os.getpid())
    for _ in range(200):
        port = rng.randrange(max(1025, low - 12000), low - 1)
        try:
            with socket.socket() as s, socket.socket() as t:
                s.bind(("127.0.0.1", port))
                t.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port
    raise RuntimeError("no two consecutive free ports below the ephemeral range")


bench = [rankmap, "bench", "-b", "1K", "-e", "1M", "-f", "4", "--check"]
mpirun = shutil.which("mpirun")
if mpirun is None:
    print("SKIP: mpirun not found", flush=True)
    sys.exit(77)

with tempfile.TemporaryDirectory() as home:
    env = clean_env(home)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader", OMPI_MCA_hwloc_base_binding_policy="none",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    ompi = [mpirun, "--oversubscribe", "-np", "3"]
    p = subprocess.run(ompi + bench, capture_output=True, text=True, timeout=120, env=env)
    print(p.stdout + p.stderr, flush=True)
    check(p.returncode == 0, f"mpirun -np 3 rankmap bench --check: exit {p.returncode}")
    check("over 3 ranks" in p.stdout and "by MPI_Bcast" in p.stdout,
          "the header names the MPI rendezvous")
    check("# Out of bounds values : 0 OK" in p.stdout, "0 wrong elements")
    check(len(re.findall(r"^\s+\d+\s+\d+\s+float", p.stdout, re.M)) == 6, "six sizes ran")
    check(re.search(r"rendezvous: rank 0 of 3 from Open MPI's library libmpi\.so\.40.*root "
                    r"127\.0\.0\.1:\d+ \(MPI_Bcast\)", p.stderr) is not None,
          "rank 0 logs the rendezvous on stderr (all ranks on one host: 127.0.0.1)")

    bad = dict(env, RANKMAP_MPI_LIBRARY="libmpi-missing.so.40")
    p = subprocess.run(ompi + ["-x", "RANKMAP_MPI_LIBRARY"] + bench, capture_output=True,
                       text=True, timeout=60, env=bad)
    check(p.returncode != 0, f"a missing MPI library: mpirun exits {p.returncode}")
    check(p.stderr.count("the MPI library libmpi-missing.so.40 could not be loaded") >= 1 and
          "set RANKMAP_ROOT" in p.stderr, "the error names the library and RANKMAP_ROOT")

    # Rank 0 cannot listen (an interface that does not exist): it broadcasts why, so every
    # rank fails at once instead of waiting in MPI_Bcast, and each finalizes MPI.
    bad = dict(env, RANKMAP_SOCKET_IFNAME="nosuchif0")
    p = subprocess.run(ompi + ["-x", "RANKMAP_SOCKET_IFNAME"] + bench, capture_output=True,
                       text=True, timeout=60, env=bad)
    check(p.returncode != 0, f"rank 0 cannot listen: mpirun exits {p.returncode}")
    check("rank 0 cannot listen" in p.stderr and "nosuchif0" in p.stderr,
          "the error says rank 0 cannot listen and names the interface")

    if importlib.util.find_spec("torch") is None:
        print("skip: torchrun part (no torch for /usr/bin/python3)", flush=True)
    else:
        port = free_port()
        # --redirects/--tee: torch 1.13 on Python 3.11 crashes without them (launch/torchrun.h).
        tr = ["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc_per_node", "3",
              "--master_addr", "127.0.0.1", "--master_port", str(port), "--redirects", "1",
              "--tee", "1", "--no_python"]
        p = subprocess.run(tr + bench, capture_output=True, text=True, timeout=120, env=env)
        out = p.stdout + p.stderr
        print(out, flush=True)
        check(p.returncode == 0, f"torchrun --nproc_per_node 3 rankmap bench: exit {p.returncode}")
        check(f"root 127.0.0.1:{port + 1} from MASTER_ADDR:MASTER_PORT+1" in out,
              "rank 0 listens on MASTER_PORT+1 beside torchrun's store")
        check("# Out of bounds values : 0 OK" in out, "0 wrong elements under torchrun")

if failures:
    print(f"{len(failures)} check(s) failed", flush=True)
    sys.exit(1)
