# NCCL loop on every rank; rank HANG_RANK sleeps inside evaluate() at step 2 (a hang that prints nothing)
import os
import time

import torch
import torch.distributed as dist


def evaluate():
    time.sleep(3600)


local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl")
rank = dist.get_rank()
t = torch.ones(1024, device="cuda")
for step in range(6):
    if step == 2 and rank == int(os.environ.get("HANG_RANK", "0")):
        evaluate()
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"STEP {step} rank={rank}", flush=True)
dist.destroy_process_group()
