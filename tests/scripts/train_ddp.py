"""A small Gloo DDP training; every rank prints a checksum of its final parameters."""
import gc
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)  # different on purpose: DDP must make them equal
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
g = torch.Generator().manual_seed(100 + rank)
for _ in range(10):
    x = torch.randn(32, 8, generator=g)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
checksum = sum(p.detach().double().sum().item() for p in model.parameters())
print(f"PARAMS rank={rank} world={dist.get_world_size()} host={os.uname()[1]} sum={checksum:.12f}",
      flush=True)
dist.destroy_process_group()
del model, opt, loss
gc.collect()
