"""Objects between ranks and the runtime's checkpoint check, on an interpreter without numpy.
Run with 2+ ranks: python objects_no_numpy.py CKPT_PATH"""
import sys

import torch

import ddpkit
from ddpkit.runtime.objects import all_gather_object, broadcast_object

try:
    import numpy  # noqa: F401
    sys.exit("numpy is importable here: this test would prove nothing")
except ImportError:
    pass

with ddpkit.init() as ctx:
    # uneven sizes: rank r sends r * 1000 items, so the padding matters
    got = all_gather_object({"rank": ctx.rank, "items": list(range(ctx.rank * 1000))})
    assert [g["rank"] for g in got] == list(range(ctx.world_size)), got
    assert all(len(g["items"]) == g["rank"] * 1000 for g in got)
    state = {"lr": 0.1, "blob": b"x" * 100_000} if ctx.rank == 1 else None
    state = broadcast_object(state, src=1)
    assert state["lr"] == 0.1 and len(state["blob"]) == 100_000
    model = ddpkit.wrap(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = ddpkit.load_checkpoint(sys.argv[1], model, opt)  # all ranks compare: none there
    ddpkit.save_checkpoint(sys.argv[1], model, opt, epoch=7)
    again = ddpkit.load_checkpoint(sys.argv[1], model, opt)
    print(f"OBJECTS OK rank={ctx.rank} start={first} resumed={again}", flush=True)
