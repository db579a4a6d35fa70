"""Training finishes on every rank, then rank $ABORT_RANK aborts at interpreter exit, as a worker
does when a Gloo thread drops the last tensor during finalization (SIGABRT). Without ddpkit the
healthy nodes then wait 300 s in torchrun's exit barrier and exit 0."""
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"TRAINED rank={dist.get_rank()} sum={t.item()}", flush=True)
dist.destroy_process_group()
if dist.is_initialized() is False and int(os.environ.get("RANK", "0")) == int(os.environ.get("ABORT_RANK", "2")):
    os.abort()
