"""A small Gloo loop that hangs on purpose (HANG_MODE) on rank HANG_RANK (default 1):
  desync  the rank skips one all_reduce, then waits in the final barrier
  sleep   the rank sleeps inside its loop (in evaluate())
  noinit  the rank never calls init_process_group
  slow    the rank is slow but advances: a healthy run that must not be touched
Every rank prints READY (with its pid) and one STEP line per step."""
import gc
import os
import time

import torch
import torch.distributed as dist

mode = os.environ.get("HANG_MODE", "")
odd = int(os.environ.get("HANG_RANK", "1"))
rank = int(os.environ["RANK"])
steps = int(os.environ.get("HANG_STEPS", "6"))
pause = float(os.environ.get("HANG_PAUSE", "0.3"))
size = int(os.environ.get("HANG_SIZE", "4"))  # floats per all_reduce


def evaluate():
    time.sleep(3600)


if mode == "noinit" and rank == odd:
    print(f"READY rank={rank} pid={os.getpid()} (skips init_process_group)", flush=True)
    time.sleep(3600)
dist.init_process_group("gloo")
print(f"READY rank={rank} pid={os.getpid()}", flush=True)
t = torch.ones(size)
t0 = time.perf_counter()
for step in range(steps):
    if step == 2 and rank == odd and mode == "desync":
        continue  # the bug: one all_reduce fewer on this rank
    if step == 2 and rank == odd and mode == "sleep":
        evaluate()
    if mode == "slow" and rank == odd:
        time.sleep(1.5)
    dist.all_reduce(t)
    print(f"STEP {step} rank={rank}", flush=True)
    time.sleep(pause)
rate = steps / (time.perf_counter() - t0)
dist.barrier()
print(f"DONE rank={rank} steps_per_s={rate:.2f}", flush=True)
dist.destroy_process_group()
del t
gc.collect()
