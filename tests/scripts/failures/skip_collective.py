"""Rank 1 skips one all_reduce: the others wait for it until the process group timeout."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
t = torch.ones(4)
if dist.get_rank() != 1:
    dist.all_reduce(t)  # rank 1 "only logs" here and goes on to the next collective
dist.all_reduce(t)
print("done", t)
