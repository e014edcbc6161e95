#!/usr/bin/python3
"""mpi_proof.py: the mpi4py twin of mpi_proof.c, for the MPI-path proof and the shim's unit tests.
It knows nothing of rankmap. Run it with Debian's /usr/bin/python3 (python3-mpi4py).

Every rank prints "rank R of N on HOST launcher L" (L: OMPI_COMM_WORLD_RANK, else PMI_RANK, -1 if
unset). Rank 0 prints "check NAME DIGEST" lines that depend on N alone (inputs depend on the rank;
every element is checked, a wrong one aborts with exit code 3). With --bytes B it also times
Allreduce of B bytes of int32 (--iters K after --warmup W untimed calls, each after a barrier, the
slowest rank's time) and rank 0 prints "time allreduce bytes=B iters=K median_s=S".
"""

import argparse
import hashlib
import os
import socket
import statistics
import sys
from array import array

from mpi4py import MPI

kCount = 1000
kPeriod = 13


def main():
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, default=0)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = p.parse_args()

    def expect(what, i, got, want):
        if got != want:
            print(f"mpi_proof.py: rank {rank}: {what}[{i}] = {got}, expected {want}",
                  file=sys.stderr, flush=True)
            comm.Abort(3)

    def report(what, values):
        if rank == 0:
            digest = hashlib.sha256(array("i", values).tobytes()).hexdigest()[:16]
            print(f"check {what} {digest}", flush=True)

    host = socket.gethostname()
    launcher = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "-1"))
    for r in range(n):
        if r == rank:
            # One write per line: Open MPI forwards each write as it comes, so a line written in
            # two pieces can interleave with another rank's.
            sys.stdout.write(f"rank {rank} of {n} on {host} launcher {launcher}\n")
            sys.stdout.flush()
        comm.Barrier()

    # Allreduce: in[j] = 7r + j % 13 -> 7 n(n-1)/2 + n (j % 13).
    send = array("i", (7 * rank + j % kPeriod for j in range(kCount)))
    recv = array("i", bytes(4 * kCount))
    comm.Allreduce(send, recv, op=MPI.SUM)
    for j in range(kCount):
        expect("allreduce", j, recv[j], 7 * n * (n - 1) // 2 + n * (j % kPeriod))
    report("allreduce", recv)

    # Bcast from the last rank: 3j + n.
    buf = array("i", (3 * j + n if rank == n - 1 else -1 for j in range(kCount)))
    comm.Bcast(buf, root=n - 1)
    for j in range(kCount):
        expect("bcast", j, buf[j], 3 * j + n)
    report("bcast", buf)

    # Allgather: rank r contributes r*r + 1.
    out = array("i", bytes(4 * n))
    comm.Allgather(array("i", [rank * rank + 1]), out)
    for r in range(n):
        expect("allgather", r, out[r], r * r + 1)
    report("allgather", out)

    # Ring: send r to r+1, receive r-1.
    got = comm.sendrecv(rank, dest=(rank + 1) % n, sendtag=7, source=(rank + n - 1) % n, recvtag=7)
    expect("sendrecv", 0, got, (rank + n - 1) % n)
    report("sendrecv", comm.gather(got, root=0) or [])

    if args.bytes > 0:
        count = args.bytes // 4
        a = array("i", (rank + j % 7919 for j in range(count)))
        b = array("i", bytes(4 * count))
        times = []
        base = n * (n - 1) // 2
        for it in range(-args.warmup, args.iters):
            comm.Barrier()
            t0 = MPI.Wtime()
            comm.Allreduce(a, b, op=MPI.SUM)
            dt = MPI.Wtime() - t0
            slowest = comm.reduce(dt, op=MPI.MAX, root=0)
            # Spot checks: a full check in Python would dominate the run.
            for j in (0, 1, count // 2, count - 1):
                expect("allreduce", j, b[j], base + n * (j % 7919))
            if it >= 0 and rank == 0:
                times.append(slowest)
        if rank == 0:
            print(f"time allreduce bytes={args.bytes} iters={args.iters} "
                  f"median_s={statistics.median(times):.6f}", flush=True)


if __name__ == "__main__":
    main()
