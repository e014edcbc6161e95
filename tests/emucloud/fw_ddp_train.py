"""A PyTorch DDP training job whose gradient exchange dominates (Gloo, CPU), for the frameworks
proof on the testbed. Launched by torchrun (one process per node); prints one JSON line per step
from rank 0: {"step", "loss", "step_s"}, then {"summary": ...}.

  fw_ddp_train.py [--steps S] [--width W]

The model is a wide MLP (64 -> W -> W -> 1; W = 2048 gives 17.3 MB of fp32 gradients, one DDP
bucket), the data of rank r is drawn from a generator seeded with r, so a run is the same job
whatever host each rank lands on: the loss curve must not depend on the rank order. Gloo builds
its ring allreduce by rank, and the ring sums in rank order, so the losses are bit-identical
across host orders. Step time = wall time of one forward/backward/allreduce/update, measured
on rank 0 between barriers, after one warm-up step.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

# The job's lines, written as fw_lib.json_lines reads them back (also when run through runpy).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fw_lib import print_line  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(64, a.width), torch.nn.Tanh(),
                                torch.nn.Linear(a.width, a.width), torch.nn.Tanh(),
                                torch.nn.Linear(a.width, 1))
    grad_bytes = sum(p.numel() for p in model.parameters()) * 4
    ddp = DDP(model, bucket_cap_mb=64)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1000 + rank)
    times = []
    for step in range(a.steps + 1):
        x = torch.randn(a.batch, 64, generator=gen)
        y = torch.sin(x.sum(dim=1, keepdim=True))
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        dist.barrier()
        dt = time.perf_counter() - t0
        total = loss.detach().clone()
        dist.all_reduce(total)
        if step > 0:
            times.append(dt)
        if rank == 0:
            print_line({"step": step, "loss": (total / world).item(), "step_s": dt})
    if rank == 0:
        times.sort()
        print_line({"summary": {"world": world, "grad_bytes": grad_bytes,
                                "median_step_s": times[len(times) // 2], "steps": a.steps}})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
