"""A healthy Gloo loop that prints nothing between READY and DONE for about SILENT_S seconds
while it steps (ddpkit.step(), or DistributedLoader batches with SILENT_LOADER=1): with
`launch --hang-timeout` shorter than SILENT_S it must not be called hung."""
import os
import time

import torch
import torch.distributed as dist

import ddpkit

pause = float(os.environ.get("SILENT_PAUSE", "0.3"))
steps = int(float(os.environ.get("SILENT_S", "10")) / pause)
ctx = ddpkit.init(backend="gloo")
print(f"READY rank={ctx.rank} pid={os.getpid()}", flush=True)
t = torch.ones(4)
if os.environ.get("SILENT_LOADER") == "1":
    data = torch.utils.data.TensorDataset(torch.arange(float(steps * ctx.world_size)))
    for (_x,) in ddpkit.loader(data, batch_size=1, shuffle=False, num_workers=0):
        time.sleep(pause)  # py-spy sees an idle rank: only the step count says it moves
        dist.all_reduce(t)
else:
    for _ in range(steps):
        time.sleep(pause)
        dist.all_reduce(t)
        ddpkit.step()
print(f"DONE rank={ctx.rank} steps={steps}", flush=True)
ddpkit.shutdown()
