"""Picklable objects between ranks without numpy: all_gather_object and broadcast_object.

torch's own object collectives turn their byte tensors into numpy arrays (`tensor.numpy()`),
and `pip install torch` brings no numpy: on such a node they fail with "Numpy is not
available". Here the bytes travel in uint8 tensors and come back through ctypes: torch and
the standard library only.

This file imports nothing of ddpkit, so it also ships as source next to jobs that run on the
nodes (`ddpkit bench` writes it as ddpkit_objects.py beside its job) and can be imported by
code that needs it outside the package (the Horovod shim).

Like torch's versions, every rank of the group must call these, and unpickling runs code the
senders chose: exchange objects only between processes you trust.
"""

from __future__ import annotations

import ctypes
import pickle
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["all_gather_object", "broadcast_object", "barrier"]


def _device(group) -> torch.device:
    """NCCL moves CUDA tensors only; everything else (Gloo, MPI) takes CPU tensors."""
    if "nccl" in str(dist.get_backend(group)).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier(group=None) -> None:
    """dist.barrier() that names this rank's GPU on NCCL: without it torch 2.11 warns on every
    call that it guesses the device (seen on an H200), and older releases guessed GPU 0."""
    device = _device(group)
    if device.type == "cuda":
        dist.barrier(group=group, device_ids=[device.index])
    else:
        dist.barrier(group=group)


def _to_tensor(obj: Any, device: torch.device) -> torch.Tensor:
    data = bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    return torch.frombuffer(data, dtype=torch.uint8).to(device)


def _from_tensor(t: torch.Tensor, size: int) -> Any:
    t = t[:size].cpu().contiguous()
    return pickle.loads(ctypes.string_at(t.data_ptr(), size))


def all_gather_object(obj: Any, group=None) -> list[Any]:
    """Every rank's obj, in rank order, on every rank."""
    world = dist.get_world_size(group)
    if world == 1:
        return [obj]
    device = _device(group)
    mine = _to_tensor(obj, device)
    size = torch.tensor([mine.numel()], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:mine.numel()] = mine
    out = [torch.empty(longest, dtype=torch.uint8, device=device) for _ in range(world)]
    dist.all_gather(out, padded, group=group)
    return [_from_tensor(t, n) for t, n in zip(out, counts)]


def broadcast_object(obj: Any = None, src: int = 0, group=None) -> Any:
    """src's obj on every rank (the other ranks' obj is ignored). src is a global rank."""
    if dist.get_world_size(group) == 1:
        return obj
    device = _device(group)
    sending = dist.get_rank() == src
    data = _to_tensor(obj, device) if sending else None
    size = torch.tensor([data.numel() if data is not None else 0], dtype=torch.int64,
                        device=device)
    dist.broadcast(size, src=src, group=group)
    n = int(size.item())
    buf = data if data is not None else torch.empty(n, dtype=torch.uint8, device=device)
    dist.broadcast(buf, src=src, group=group)
    return obj if sending else _from_tensor(buf, n)
