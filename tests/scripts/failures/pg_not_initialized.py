"""Uses the default process group before init_process_group."""
import torch
import torch.distributed as dist

t = torch.ones(1)
dist.all_reduce(t)
