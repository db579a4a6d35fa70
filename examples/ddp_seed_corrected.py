"""The CentOS guide's ddp_demo.py, corrected. Run it with a launcher:

    ddpkit launch -H node0:4,node1:4 examples/ddp_seed_corrected.py
    torchrun --nproc-per-node 2 examples/ddp_seed_corrected.py          (one machine)

What changed from the guide, and why:
- no --rank/--world-size arguments: the launcher sets RANK, WORLD_SIZE and LOCAL_RANK for every
  process (the guide passed `--rank 0` to all of them, so every process claimed rank 0);
- init_process_group() reads MASTER_ADDR/MASTER_PORT from the environment (env://) instead of
  a hard-coded tcp:// address;
- the GPU is chosen by LOCAL_RANK, not by the global rank (rank 5 on node 1 is GPU 1 there);
- NCCL with GPUs, Gloo without: the same script runs on a CPU-only machine;
- sampler.set_epoch() every epoch, num_workers/pin_memory only where they help;
- the process group is destroyed and nothing refers to it at exit (see the README: otherwise
  a Gloo worker can abort the process after training).
"""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same data on every rank; the sampler gives each its shard
    x = torch.randn(1024, 10)
    ds = TensorDataset(x, x.sum(1, keepdim=True))
    sampler = DistributedSampler(ds, num_replicas=world_size, rank=rank)
    dl = DataLoader(ds, batch_size=32, sampler=sampler, num_workers=2 if cuda else 0,
                    pin_memory=cuda)

    model = DDP(nn.Linear(10, 1).to(device), device_ids=[local_rank] if cuda else None)
    opt = optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.MSELoss()
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for xb, yb in dl:
            xb, yb = xb.to(device), yb.to(device)
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch} loss {loss.item():.4f}", flush=True)
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"RESULT rank={rank} params={checksum:.10f}", flush=True)

    dist.destroy_process_group()
    del model, opt, dl
    gc.collect()


if __name__ == "__main__":
    main()
