"""What a training script imports: the guides' advice for stable DDP, done once, correctly.

    import ddpkit

    with ddpkit.init() as ctx:                       # NCCL on GPUs, Gloo on CPU; device set
        ddpkit.seed_everything(0)
        model = ddpkit.wrap(Net().to(ctx.device))   # DDP with the right device_ids
        loader = ddpkit.loader(dataset, batch_size=32, shuffle=True)
        opt = torch.optim.SGD(model.parameters(), lr=ddpkit.scale_lr(0.01))
        start = ddpkit.load_checkpoint("ckpt.pt", model, opt)   # resumes after a restart
        for epoch in loader.epochs(start, 10):       # set_epoch() every epoch, for you
            for x, y in loader: ...
            ddpkit.save_checkpoint("ckpt.pt", model, opt, epoch=epoch + 1)
        ddpkit.print0("done")                        # the group is destroyed on exit

Small and explicit: plain torch.distributed underneath, nothing hidden that a user would have
to work around.
"""

from __future__ import annotations

import datetime
import gc
import math
import os
import random
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from ddpkit.runtime.objects import barrier

__all__ = ["Context", "init", "shutdown", "seed_everything", "loader", "DistributedLoader",
           "scale_lr", "global_batch_size", "wrap", "save_checkpoint", "load_checkpoint",
           "print0", "is_main", "step"]

# Steps this process has made: each batch a DistributedLoader hands out, and each step() call.
# `ddpkit launch --hang-timeout` reads it (through the watcher thread the launch starts in
# every worker, nodeside/bootstrap.py): a silent rank whose count still moves is not hung.
_steps = 0


def step() -> None:
    """Count one training step, for scripts with their own loop (a DistributedLoader counts
    its batches already). Costs one integer addition; only `launch --hang-timeout` looks."""
    global _steps
    _steps += 1


@dataclass(frozen=True)
class Context:
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc) -> None:
        shutdown()


def _env_int(env: dict, name: str, default: int) -> int:
    value = env.get(name)
    return int(value) if value not in (None, "") else default


def init(backend: str | None = None, timeout: float = 1800.0, env: dict | None = None) -> Context:
    """Join the run torchrun (or ddpkit launch) started: read RANK/WORLD_SIZE/LOCAL_RANK, pick
    NCCL when CUDA is there and Gloo otherwise, bind this process to its GPU, and set the
    collective timeout (seconds). Without a launcher it runs as a world of one."""
    env = dict(os.environ if env is None else env)
    rank, world = _env_int(env, "RANK", 0), _env_int(env, "WORLD_SIZE", 1)
    local_rank = _env_int(env, "LOCAL_RANK", 0)
    local_world = _env_int(env, "LOCAL_WORLD_SIZE", world)
    cuda = torch.cuda.is_available()
    backend = backend or ("nccl" if cuda else "gloo")
    device = torch.device("cuda", local_rank % max(1, torch.cuda.device_count())) if cuda \
        else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        if "MASTER_ADDR" not in env:  # a plain `python train.py`: a world of one, on this machine
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            os.environ.setdefault("RANK", "0")
            os.environ.setdefault("WORLD_SIZE", "1")
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
    _start_watch()
    return Context(rank=rank, local_rank=local_rank, world_size=world,
                   local_world_size=local_world, device=device, backend=backend)


def _start_watch() -> None:
    """A launch with --hang-timeout and --no-bootstrap: the watcher the bootstrap would have
    started (here, not at import: a DataLoader worker imports this module too)."""
    if os.environ.get("DDPKIT_WATCH_DIR"):
        from ddpkit.nodeside.bootstrap import start_watch

        start_watch()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shutdown() -> None:
    """Destroy the process group, then collect: with objects still referring to it, Gloo's
    worker threads would release their last tensors during interpreter shutdown and abort the
    process (SIGABRT, 'terminate called without an active exception'; see the README)."""
    if dist.is_initialized():
        dist.destroy_process_group()
    gc.collect()


def is_main() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def print0(*args: Any, **kwargs: Any) -> None:
    """print on rank 0 only (flushed: output goes through torchrun's log files)."""
    if is_main():
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """The same seed for Python, NumPy (when installed) and torch on every rank."""
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    try:
        import numpy

        numpy.random.seed(seed % 2**32)
    except ImportError:
        pass
    if deterministic:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False


def _world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def scale_lr(lr: float, rule: str = "linear", world_size: int | None = None) -> float:
    """The learning rate for the global batch: x world size ('linear', SGD) or x sqrt(world
    size) ('sqrt', adaptive optimizers)."""
    n = world_size or _world()
    if rule == "linear":
        return lr * n
    if rule == "sqrt":
        return lr * math.sqrt(n)
    raise ValueError(f"scale_lr: rule must be 'linear' or 'sqrt', not {rule!r}")


def global_batch_size(per_device: int, world_size: int | None = None,
                      accumulation: int = 1) -> int:
    """Samples per optimizer step across all ranks: per device x ranks x accumulation steps."""
    return per_device * (world_size or _world()) * accumulation


class DistributedLoader:
    """A DataLoader over this rank's shard (DistributedSampler) that calls set_epoch() for you,
    so every epoch is shuffled differently and identically on all ranks."""

    def __init__(self, dataset, batch_size: int, *, shuffle: bool = True, drop_last: bool = False,
                 seed: int = 0, num_workers: int | None = None, pin_memory: bool | None = None,
                 **kwargs: Any) -> None:
        from torch.utils.data import DataLoader, DistributedSampler

        world = _world()
        rank = dist.get_rank() if dist.is_initialized() else 0
        self.sampler = DistributedSampler(dataset, num_replicas=world, rank=rank,
                                          shuffle=shuffle, seed=seed, drop_last=drop_last)
        if num_workers is None:
            # a few workers per rank, never more than this rank's share of the CPUs
            cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
            num_workers = max(0, min(4, cpus // max(1, local) - 1))
        if pin_memory is None:
            pin_memory = torch.cuda.is_available()
        self.epoch = 0
        self.loader = DataLoader(dataset, batch_size=batch_size, sampler=self.sampler,
                                 num_workers=num_workers, pin_memory=pin_memory,
                                 persistent_workers=num_workers > 0, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.sampler.set_epoch(epoch)

    def epochs(self, start: int, stop: int):
        """range(start, stop), calling set_epoch() before each epoch."""
        for epoch in range(start, stop):
            self.set_epoch(epoch)
            yield epoch

    def __iter__(self):
        global _steps
        for batch in self.loader:
            _steps += 1  # progress for --hang-timeout: a batch handed out is a step begun
            yield batch

    def __len__(self) -> int:
        return len(self.loader)


def loader(dataset, batch_size: int, **kwargs: Any) -> DistributedLoader:
    return DistributedLoader(dataset, batch_size, **kwargs)


def wrap(model: torch.nn.Module, **ddp_kwargs: Any) -> torch.nn.Module:
    """DistributedDataParallel with device_ids set right for this process (none on CPU)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if not dist.is_initialized():
        return model
    device = next(model.parameters()).device
    if device.type == "cuda":
        ddp_kwargs.setdefault("device_ids", [device.index])
        ddp_kwargs.setdefault("output_device", device.index)
    return DDP(model, **ddp_kwargs)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "module", model)


def _barrier() -> None:
    if dist.is_initialized():
        barrier()


def save_checkpoint(path: str, model: torch.nn.Module, optimizer=None, **extra: Any) -> None:
    """Rank 0 writes the checkpoint atomically (a temporary file renamed into place), then all
    ranks meet: a run killed mid-write never leaves a half checkpoint to resume from."""
    if is_main():
        state = {"model": _unwrap(model).state_dict(), "extra": extra}
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        tmp = f"{path}.tmp.{os.getpid()}"
        torch.save(state, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    _barrier()


def load_checkpoint(path: str, model: torch.nn.Module, optimizer=None,
                    key: str = "epoch", default: int = 0) -> int:
    """Load the last complete checkpoint on every rank (onto this rank's device, not cuda:0)
    and return extra[key] (the epoch to resume from), or default when there is none."""
    _barrier()
    exists = os.path.exists(path)
    if dist.is_initialized() and dist.get_world_size() > 1:
        from ddpkit.runtime.objects import all_gather_object  # torch's needs numpy

        seen = all_gather_object(exists)
        if len(set(seen)) > 1:
            # rank 0 wrote it to a disk the other nodes do not see: resuming would diverge
            missing = [r for r, ok in enumerate(seen) if not ok]
            raise RuntimeError(f"checkpoint {path} exists on some ranks but not on ranks "
                               f"{missing}: put checkpoints on a filesystem every node mounts")
    if not exists:
        return default
    device = next(_unwrap(model).parameters()).device
    state = torch.load(path, map_location=device, weights_only=False)
    _unwrap(model).load_state_dict(state["model"])
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    return int(state.get("extra", {}).get(key, default))
