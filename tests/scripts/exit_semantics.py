"""What a script may expect of the interpreter at exit, under ddpkit's bootstrap: __name__,
argv[0], sys.path[0], a sibling import, atexit handlers that still use the process group, a
file left open that gets flushed. OUT_DIR: where each rank writes its file; RAISE_RANK: that
rank raises from a function instead (for the traceback)."""
import atexit
import os
import sys

import exit_sibling
import torch
import torch.distributed as dist


def fail(rank):
    raise ValueError(f"planned error on rank {rank}")


def last_words(t):
    # plain Python runs atexit handlers with the group still initialised: so must we
    dist.all_reduce(t)
    print(f"ATEXIT rank={dist.get_rank()} initialised={dist.is_initialized()} sum={t.item()}",
          flush=True)


dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"NAME {__name__} ARGV0 {sys.argv[0]} PATH0 {sys.path[0]} {exit_sibling.WHERE}", flush=True)
if rank == int(os.environ.get("RAISE_RANK", "-1")):
    fail(rank)
if "RAISE_RANK" not in os.environ:
    atexit.register(last_words, torch.ones(1))
left_open = open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}.txt"), "w")
left_open.write(f"written by rank {rank}, never closed")  # buffered: only exit flushes it
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
