# every rank on GPU 0 (a mistake users make: set_device(0) for all, or no LOCAL_RANK): NCCL refuses it
import torch
import torch.distributed as dist

torch.cuda.set_device(0)
dist.init_process_group("nccl")
t = torch.ones(4, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("sum", t[0].item(), flush=True)
dist.destroy_process_group()
