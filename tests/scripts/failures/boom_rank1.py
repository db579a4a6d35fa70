"""Rank 1 raises an error of the script's own (no distributed cause at all)."""
import datetime

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
rank = dist.get_rank()
if rank == 1:
    raise RuntimeError(f"boom on rank {rank}")
dist.barrier()
