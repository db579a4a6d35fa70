"""Time ddpkit.horovod's blocking allreduce on 2 ranks (run by `ddpkit launch --horovod`): a
4-byte tensor (where the agreement row costs most) and a 4 MiB one. Rank 0 prints
"HVD_US small=<microseconds per op> large=<microseconds per op>"."""
import os
import time

import horovod.torch as hvd
import torch

hvd.init()


def per_op(tensor, reps):
    for _ in range(10):
        hvd.allreduce(tensor)
    t0 = time.perf_counter()
    for _ in range(reps):
        hvd.allreduce(tensor)
    return (time.perf_counter() - t0) / reps * 1e6


small, large = per_op(torch.ones(1), 400), per_op(torch.ones(1 << 20), 40)
if hvd.rank() == 0:
    print(f"HVD_US small={small:.1f} large={large:.1f}", flush=True)
hvd.shutdown()
os._exit(0)
