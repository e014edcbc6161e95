"""One PyTorch DDP step (and a few order-sensitive collectives) for the NCCL shim test.

Run under torchrun with every process on GPU 0; each process takes its own NCCL_HOSTID so
that NCCL accepts several ranks on one GPU (socket transport). Data are small integers, so
every reduction is exact in fp32 and the results must be bit-identical with and without
librankmap_nccl.so. Writes "<rank> <sha256 of the results>" to OUT_DIR/rank<r>.txt.
"""
import hashlib
import os
import sys

local_rank = int(os.environ["LOCAL_RANK"])
os.environ.setdefault("NCCL_HOSTID", f"rankmap-ddp-host-{local_rank}")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main(out_dir):
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
    rank, world = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)

    model = torch.nn.Linear(16, 4, bias=False).to(dev)
    with torch.no_grad():
        model.weight.copy_((torch.arange(64, device=dev).reshape(4, 16) % 5).float())
    ddp = DDP(model, device_ids=[0])
    x = torch.full((8, 16), float(rank + 1), device=dev)
    ddp(x).sum().backward()
    grad = model.weight.grad.detach().clone()
    expect = torch.full_like(grad, 8.0 * world * (world + 1) / 2 / world)
    assert torch.equal(grad, expect), f"rank {rank}: DDP gradient {grad} != {expect}"

    gathered = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([rank], dtype=torch.int64, device=dev))
    order = [int(t.item()) for t in gathered]
    assert order == list(range(world)), f"rank {rank}: all_gather order {order}"

    b = torch.tensor([rank * 10], dtype=torch.int64, device=dev)
    dist.broadcast(b, src=world - 1)
    assert int(b.item()) == (world - 1) * 10, f"rank {rank}: broadcast from the last rank"

    rs_in = torch.arange(world * 3, dtype=torch.int64, device=dev) + 100 * rank
    rs_out = torch.zeros(3, dtype=torch.int64, device=dev)
    dist.reduce_scatter_tensor(rs_out, rs_in)
    want = sum(torch.arange(rank * 3, rank * 3 + 3, device=dev) + 100 * r for r in range(world))
    assert torch.equal(rs_out, want), f"rank {rank}: reduce_scatter {rs_out} != {want}"

    digest = hashlib.sha256()
    for t in (grad, torch.cat(gathered), b, rs_out):
        digest.update(t.cpu().numpy().tobytes())
    with open(os.path.join(out_dir, f"rank{rank}.txt"), "w") as f:
        f.write(f"{rank} {digest.hexdigest()}\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
