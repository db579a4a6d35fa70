"""Every rank says READY (with its pid) and then sleeps: a run to interrupt or kill.
With IGNORE_TERM=1 the ranks ignore SIGTERM, as a worker stuck in a C call would."""
import os
import signal
import time

import torch.distributed as dist

if os.environ.get("IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
dist.init_process_group("gloo")
print(f"READY rank={dist.get_rank()} pid={os.getpid()}", flush=True)
time.sleep(3600)
