"""One rank of the tuner plugin's GPU check (nccl_tuner_test.sh): torch.distributed over NCCL,
every collective the tuner adjusts, at sizes from 8 bytes to 64 MiB, integer data whose results
have a closed form; every element is checked. Prints one "ok RANK" line when all are exact.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p python3 nccl_tuner_check.py
"""
import os
import sys

import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(0)
dev = torch.device("cuda", 0)
# device_id: the communicator is made at once (ncclCommInitRankConfig), as in every job that
# binds a device.
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)

failures = []


def pattern(r, n):  # rank r's element i: r * 1000 + i % 997, exact in int32 sums
    return torch.arange(n, dtype=torch.int32, device=dev) % 997 + r * 1000


for n in (2, 256, 65536, 1 << 20, 1 << 24):  # int32 elements: 8 B .. 64 MiB
    x = pattern(rank, n)
    dist.all_reduce(x)
    want = (torch.arange(n, dtype=torch.int32, device=dev) % 997) * world + 1000 * sum(range(world))
    if not torch.equal(x, want):
        failures.append(f"all_reduce {n}")
    out = torch.empty(n * world, dtype=torch.int32, device=dev)
    dist.all_gather_into_tensor(out, pattern(rank, n))
    if not torch.equal(out, torch.cat([pattern(r, n) for r in range(world)])):
        failures.append(f"all_gather {n}")
    part = torch.empty(n, dtype=torch.int32, device=dev)
    dist.reduce_scatter_tensor(part, torch.cat([pattern(rank, n)] * world))
    if not torch.equal(part, pattern(0, n) * world + 1000 * sum(range(world))):
        failures.append(f"reduce_scatter {n}")
    b = pattern(rank, n)
    dist.broadcast(b, src=world - 1)
    if not torch.equal(b, pattern(world - 1, n)):
        failures.append(f"broadcast {n}")
torch.cuda.synchronize()
dist.destroy_process_group()
if failures:
    print(f"FAIL {rank}: {', '.join(failures)}", flush=True)
    sys.exit(1)
print(f"ok {rank}", flush=True)
