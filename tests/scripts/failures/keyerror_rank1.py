"""Rank 1 hits a bug of the script itself (a missing key); rank 0 waits for it in a collective."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
batch = {"label": torch.ones(2)}
if dist.get_rank() == 1:
    x = batch["image"]  # the bug: this dataset has no "image" field
t = torch.ones(4)
dist.all_reduce(t)
print("done", t)
