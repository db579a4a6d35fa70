"""A DDP model with a branch that the forward pass never uses."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(4, 4)
        self.unused = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.used(x)


dist.init_process_group("gloo")
model = DDP(Net())
for _step in range(3):
    model(torch.randn(2, 4)).sum().backward()
