"""A run that succeeds while printing what real runs print: warnings, deprecations, metrics with
'error' in their names, a retried connection, a timeout setting. Nothing here is a failure."""
import datetime
import os
import warnings

import torch
import torch.distributed as dist

warnings.warn("torch.cuda.amp.GradScaler(args...) is deprecated", FutureWarning, stacklevel=1)
warnings.warn("This DataLoader will create 8 worker processes in total.", UserWarning, stacklevel=1)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
print(f"[rank {rank}] LOCAL_RANK={os.environ['LOCAL_RANK']} timeout=60s, retries=3")
for step in range(3):
    t = torch.ones(4) * step
    dist.all_reduce(t)
    print(f"step {step} loss 0.{9 - step} val_error 0.{5 - step} mean_abs_error 0.1 "
          f"errors_skipped 0 failed_batches 0")
if rank == 0:
    print("Evaluation: 0 errors, 0 failures; saving checkpoint to ckpt/step3.pt")
dist.barrier()
dist.destroy_process_group()
print("training complete")
