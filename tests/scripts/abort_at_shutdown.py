"""Training finishes on every rank; then rank $ABORT_RANK aborts during the interpreter's own
shutdown, after ddpkit's bootstrap reported the end of the script (an object that only module
teardown frees aborts in its destructor, as a Gloo thread does in torch 2.13)."""
import builtins
import os

import torch
import torch.distributed as dist


class AbortWhenFreed:
    def __del__(self, abort=os.abort):  # module globals are gone by then
        abort()


dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"TRAINED rank={dist.get_rank()} sum={t.item()}", flush=True)
if dist.get_rank() == int(os.environ.get("ABORT_RANK", "1")):
    builtins.ddpkit_test_bomb = AbortWhenFreed()  # freed only at the end of Py_FinalizeEx
dist.destroy_process_group()
