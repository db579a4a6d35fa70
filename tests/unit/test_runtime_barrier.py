"""The barrier of ddpkit.runtime, the Horovod shim and the bench job names the rank's GPU on NCCL. No GPU here: torch.distributed's
backend and CUDA's current device are stood in for (the NCCL path itself ran on an H200 with
examples/ddp_runtime.py; README, GPU status)."""
import pytest
import torch
import torch.distributed as dist

import ddpkit.runtime as rt
from ddpkit.compat.horovod_torch import _ops


def barrier_calls(monkeypatch, backend: str, cuda: bool, call=rt._barrier) -> list:
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(dist, "barrier", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    call()
    return calls


@pytest.mark.parametrize("call", [rt._barrier, _ops.barrier])  # the shim ships its own copy
def test_nccl_barrier_names_this_ranks_gpu(monkeypatch, call):
    assert barrier_calls(monkeypatch, "nccl", True, call) == [{"group": None, "device_ids": [3]}]


@pytest.mark.parametrize("call", [rt._barrier, _ops.barrier])
def test_gloo_barrier_names_no_device(monkeypatch, call):
    assert barrier_calls(monkeypatch, "gloo", False, call) == [{"group": None}]
    assert barrier_calls(monkeypatch, "gloo", True, call) == [{"group": None}]
