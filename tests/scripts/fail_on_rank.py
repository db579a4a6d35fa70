"""Rank $FAIL_RANK raises after init; every other rank blocks in a collective (a hang without
a launcher that tears the run down)."""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"READY rank={dist.get_rank()} pid={os.getpid()}", flush=True)
if dist.get_rank() == int(os.environ.get("FAIL_RANK", "1")):
    time.sleep(float(os.environ.get("FAIL_AFTER", "0.5")))
    raise RuntimeError(f"planned failure on rank {dist.get_rank()}")
dist.barrier()
time.sleep(3600)
