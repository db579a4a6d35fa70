"""Every rank says READY (with its pid) and then sleeps: a run to interrupt or kill."""
import os
import time

import torch.distributed as dist

dist.init_process_group("gloo")
print(f"READY rank={dist.get_rank()} pid={os.getpid()}", flush=True)
time.sleep(3600)
