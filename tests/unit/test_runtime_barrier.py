"""ddpkit.runtime's barrier names the rank's GPU on NCCL. No GPU here: torch.distributed's
backend and CUDA's current device are stood in for (the NCCL path itself ran on an H200 with
examples/ddp_runtime.py; README, GPU status)."""
import torch
import torch.distributed as dist

import ddpkit.runtime as rt


def barrier_calls(monkeypatch, backend: str, cuda: bool) -> list:
    calls = []
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda group=None: backend)
    monkeypatch.setattr(dist, "barrier", lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    rt._barrier()
    return calls


def test_nccl_barrier_names_this_ranks_gpu(monkeypatch):
    assert barrier_calls(monkeypatch, "nccl", True) == [{"device_ids": [3]}]


def test_gloo_barrier_names_no_device(monkeypatch):
    assert barrier_calls(monkeypatch, "gloo", False) == [{}]
    assert barrier_calls(monkeypatch, "gloo", True) == [{}]
