# CUDA out of memory on a rank after a first all_reduce (400 GB asked of one GPU, a plain cudaMalloc)
import os

import torch
import torch.distributed as dist

torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
print("step 0 ok", flush=True)
x = torch.empty(100_000_000_000, dtype=torch.float32, device="cuda")  # 400 GB on one GPU
print(x.shape)
