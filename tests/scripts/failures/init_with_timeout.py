"""init_process_group over env:// with a short timeout (MASTER_ADDR/PORT, RANK, WORLD_SIZE set by
the caller)."""
import datetime

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
dist.barrier()
