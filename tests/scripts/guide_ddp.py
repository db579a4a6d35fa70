"""A correct DDP script as the guides write it: Gloo, top-level code, ends with
destroy_process_group() and lets the interpreter exit."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for _ in range(5):
    x = torch.randn(32, 8)
    loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
t = torch.ones(1)
dist.all_reduce(t)
print(f"DONE rank={rank} sum={t.item()}", flush=True)
dist.destroy_process_group()
