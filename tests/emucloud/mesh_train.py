"""A PyTorch (Gloo, CPU) training job on a 2-D mesh dp x pp built with new_group, for the mesh
proof on the testbed (mesh_bench.py --job torch). Launched by torchrun, one process per node;
prints one JSON line per step from rank 0: {"step", "loss", "step_s"}, then {"summary": ...}.

  mesh_train.py --dp D --pp P [--steps S] [--hidden H] [--vocab V] [--tokens T]

Mesh order is PyTorch's (init_device_mesh(("dp", "pp"), (D, P))): rank = d * P + q, the last
dimension fastest. Pipeline stage q of data-parallel replica d is rank d * P + q; each stage holds
an embedding table of V x H (a dense gradient of V * H * 4 bytes) and adds its rows for the
step's T token ids to the activations it receives, the last stage ends in a linear head. A step:
stage 0 sends its activations (T x H floats) to stage 1 and so on (dist.send/recv, Gloo pairs),
the last stage computes the loss and the gradients flow back the same way; then every stage
all-reduces its gradients (one flat buffer) in its data-parallel group (new_group of the ranks
with the same q: Gloo's ring in group-rank order). The compute is a gather and a few T x H
element-wise operations: the step is its communication.

The data of replica d come from a generator seeded with d, so a run is the same job whatever
host each rank lands on: Gloo sums in group-rank order, which host placement does not change,
so the loss curve is bit-identical across host orders. Step time: wall time of one step on rank 0
between world barriers, after one warm-up step, with its phases on rank 0 (pp_s: up to the
gradients' allreduce; dp_s: the allreduce); the summary has the median step.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

# The job's lines, written as fw_lib.json_lines reads them back (also when run through runpy).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fw_lib import print_line  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dp", type=int, required=True)
    p.add_argument("--pp", type=int, required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--tokens", type=int, default=512)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if world != a.dp * a.pp:
        raise SystemExit(f"mesh_train: world size {world} is not dp x pp = {a.dp * a.pp}")
    d, q = divmod(rank, a.pp)
    # Every rank creates every group, in the same order (new_group's contract).
    dp_group = None
    for qq in range(a.pp):
        g = dist.new_group([dd * a.pp + qq for dd in range(a.dp)])
        if qq == q:
            dp_group = g
    last = q == a.pp - 1
    torch.manual_seed(1234 + q)
    table = torch.nn.Embedding(a.vocab, a.hidden)
    params = list(table.parameters())
    head = None
    if last:
        head = torch.nn.Linear(a.hidden, 1)
        params += list(head.parameters())
    opt = torch.optim.SGD(params, lr=0.1)
    dp_bytes = sum(x.numel() for x in params) * 4
    gen = torch.Generator().manual_seed(1000 + d)
    times = []
    for step in range(a.steps + 1):
        # Every stage of replica d draws the same batch (same generator, same draws).
        ids = torch.randint(a.vocab, (a.tokens,), generator=gen)
        target = torch.sin(ids.float() / a.vocab * 6.283).unsqueeze(1)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad()
        if q == 0:
            inp = torch.zeros(a.tokens, a.hidden)
        else:
            inp = torch.empty(a.tokens, a.hidden)
            dist.recv(inp, src=rank - 1)
            inp.requires_grad_(True)
        act = torch.tanh(inp + table(ids))
        if last:
            loss = torch.nn.functional.mse_loss(head(act), target)
            loss.backward()
        else:
            dist.send(act.detach(), dst=rank + 1)
            grad = torch.empty(a.tokens, a.hidden)
            dist.recv(grad, src=rank + 1)
            act.backward(grad)
            loss = torch.zeros(())
        if q > 0:
            dist.send(inp.grad, dst=rank - 1)
        flat = torch.cat([x.grad.reshape(-1) for x in params])
        t1 = time.perf_counter()
        dist.all_reduce(flat, group=dp_group)
        t2 = time.perf_counter()
        flat /= a.dp
        pos = 0
        for x in params:
            n = x.numel()
            x.grad.copy_(flat[pos:pos + n].view_as(x.grad))
            pos += n
        opt.step()
        dist.barrier()
        dt = time.perf_counter() - t0
        total = loss.detach().clone()
        dist.all_reduce(total)
        # Rank 0's phases: the pipeline (up to its gradients' allreduce) and the allreduce.
        phases = {"pp_s": t1 - t0, "dp_s": t2 - t1}
        if step > 0:
            times.append((dt, phases))
        if rank == 0:
            print_line({"step": step, "loss": (total / a.dp).item(), "step_s": dt, **phases})
    if rank == 0:
        times.sort(key=lambda t: t[0])
        print_line({"summary": {"world": world, "dp": a.dp, "pp": a.pp, "dp_bytes": dp_bytes,
                                "pp_bytes": a.tokens * a.hidden * 4,
                                "median_step_s": times[len(times) // 2][0],
                                "median_step_phases": times[len(times) // 2][1],
                                "steps": a.steps}})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
