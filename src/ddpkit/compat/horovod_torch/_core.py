"""State, identity, process sets and clean-up of the Horovod API over torch.distributed.

Shipped to the nodes with the rest of this folder as `horovod/torch/`: torch and the standard
library only, and relative imports only.
"""

from __future__ import annotations

import atexit
import datetime
import gc
import os
import warnings

import torch
import torch.distributed as dist

_state = {"initialized": False, "owns_group": False, "atexit": False}
_sets: dict[int, ProcessSet] = {}


class HorovodInternalError(RuntimeError):
    pass


class ProcessSet:
    """A subset of the ranks (Horovod's process set), backed by a torch process group. Every
    rank must create the same process sets in the same order (hvd.add_process_set or
    hvd.init(process_sets=...)), as torch.distributed.new_group requires."""

    def __init__(self, ranks_or_comm):
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise ValueError("ddpkit.horovod: a ProcessSet is made from a list of ranks "
                             "(MPI communicators are not supported)")
        self.ranks = sorted(int(r) for r in ranks_or_comm)
        self.process_set_id = None
        self.group = None  # None: the default (world) group

    def _invalid(self) -> bool:
        return self.process_set_id is None

    def size(self) -> int:
        return len(self.ranks)

    def rank(self) -> int:
        """This process's rank within the set (-1 when it is not a member)."""
        me = dist.get_rank()
        return self.ranks.index(me) if me in self.ranks else -1

    def included(self) -> bool:
        return dist.get_rank() in self.ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0


def _export_horovod_env() -> None:
    """The HOROVOD_* variables horovodrun --gloo gives every worker, from torchrun's, for
    scripts (and Horovod's own tests) that read them."""
    pairs = {"HOROVOD_RANK": "RANK", "HOROVOD_SIZE": "WORLD_SIZE",
             "HOROVOD_LOCAL_RANK": "LOCAL_RANK", "HOROVOD_LOCAL_SIZE": "LOCAL_WORLD_SIZE",
             "HOROVOD_CROSS_RANK": "GROUP_RANK", "HOROVOD_CROSS_SIZE": "GROUP_WORLD_SIZE"}
    if "RANK" in os.environ and "TORCHELASTIC_RUN_ID" in os.environ:
        for ours, theirs in pairs.items():
            if theirs in os.environ:
                os.environ.setdefault(ours, os.environ[theirs])


_export_horovod_env()


def init(comm=None, process_sets=None) -> None:
    """Join the run started by torchrun / ddpkit launch (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""
    if comm is not None:
        warnings.warn("ddpkit.horovod ignores comm=: every rank is in the run", stacklevel=2)
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if "MASTER_ADDR" not in os.environ:  # `python train.py`: a world of one
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0",
                              WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        _init_group(backend)
        _state["owns_group"] = True
    global_process_set.ranks = list(range(dist.get_world_size()))
    _sets[0] = global_process_set
    _state["initialized"] = True
    if not _state["atexit"]:
        # torch 2.13's Gloo aborts at interpreter exit when a process group is still alive
        # during Py_FinalizeEx; scripts that skip hvd.shutdown() must not end that way.
        atexit.register(_at_exit)
        _state["atexit"] = True
    if process_sets == "dynamic" or process_sets is None:
        return
    for ps in process_sets:
        add_process_set(ps)


def _init_group(backend: str) -> None:
    timeout = datetime.timedelta(minutes=30)
    _state["inits"] = _state.get("inits", 0) + 1
    if _state["inits"] == 1 or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        dist.init_process_group(backend, timeout=timeout)
        return
    # hvd.init() after hvd.shutdown(): the default group's keys in torchrun's store still hold
    # the previous group's addresses, and a rank that reads them first fails in Gloo's
    # connectFullMesh ("Connection refused"); a fresh key prefix per init avoids the stale keys.
    base = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                         is_master=False, timeout=timeout)
    store = dist.PrefixStore(f"ddpkit_hvd_init/{_state['inits']}", base)
    dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _at_exit() -> None:
    try:
        shutdown()
    except Exception:  # the interpreter is ending: nothing left to report to
        pass


def shutdown() -> None:
    from . import _ops

    _ops.forget_pending()
    for ps in list(_sets.values()):
        if ps is not global_process_set:
            _drop_set(ps)
    if _state["owns_group"] and dist.is_initialized():
        dist.destroy_process_group()
    _state.update(initialized=False, owns_group=False)
    gc.collect()  # nothing may hold the group at interpreter exit (see ddpkit.runtime.shutdown)


def is_initialized() -> bool:
    return _state["initialized"] and dist.is_initialized()


def _check() -> None:
    if not is_initialized():
        raise ValueError("Horovod has not been initialized; use hvd.init().")


def size() -> int:
    _check()
    return dist.get_world_size()


def rank() -> int:
    _check()
    return dist.get_rank()


def local_rank() -> int:
    _check()
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_size() -> int:
    _check()
    return int(os.environ.get("LOCAL_WORLD_SIZE", str(size())))


def cross_rank() -> int:
    """The node's index (torchrun's GROUP_RANK)."""
    _check()
    return int(os.environ.get("GROUP_RANK", str(rank() // max(1, local_size()))))


def cross_size() -> int:
    """The number of nodes."""
    _check()
    return int(os.environ.get("GROUP_WORLD_SIZE", str(max(1, size() // max(1, local_size())))))


def is_homogeneous() -> bool:
    return size() % max(1, local_size()) == 0


def mpi_threads_supported() -> bool:
    return False


def mpi_enabled() -> bool:
    return False


def mpi_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return dist.is_initialized() and dist.get_backend() == "gloo"


def gloo_built() -> bool:
    return dist.is_gloo_available()


def nccl_built() -> int:
    """NCCL's version code as Horovod gives it (0: no NCCL)."""
    if not (dist.is_nccl_available() and torch.cuda.is_available()):
        return 0
    major, minor, patch = torch.cuda.nccl.version()[:3]
    return major * 10000 + minor * 100 + patch if (major, minor) >= (2, 9) else \
        major * 1000 + minor * 100 + patch


def cuda_built() -> bool:
    return torch.version.cuda is not None


def rocm_built() -> bool:
    return torch.version.hip is not None


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


# --- process sets -----------------------------------------------------------------------------

def add_process_set(process_set) -> ProcessSet:
    """Register a process set on every rank (collective: all ranks call it, in the same order)."""
    _check()
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if not ps._invalid():
        raise ValueError(f"{ps} is already registered")
    world = dist.get_world_size()
    if not ps.ranks or ps.ranks[0] < 0 or ps.ranks[-1] >= world or len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError(f"process set ranks {ps.ranks} must be distinct ranks of 0..{world - 1}")
    if any(other.ranks == ps.ranks for other in _sets.values()):
        raise ValueError(f"a process set with ranks {ps.ranks} already exists")
    ps.group = dist.new_group(ps.ranks) if ps.ranks != list(range(world)) else None
    ps.process_set_id = max(_sets) + 1
    _sets[ps.process_set_id] = ps
    return ps


def _drop_set(ps: ProcessSet) -> None:
    group = ps.group
    _sets.pop(ps.process_set_id, None)
    ps.process_set_id, ps.group = None, None
    if group is not None and ps.included() and dist.is_initialized():
        dist.destroy_process_group(group)


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set (collective, like add_process_set)."""
    _check()
    if process_set is global_process_set or process_set._invalid():
        return False
    _drop_set(process_set)
    return True


def get_process_set_ids_and_ranks() -> dict:
    _check()
    return {i: list(ps.ranks) for i, ps in _sets.items()}


def _resolve_set(process_set) -> ProcessSet:
    _check()
    ps = global_process_set if process_set is None else process_set
    if ps._invalid():
        raise ValueError(f"{ps} is not registered (hvd.add_process_set)")
    if not ps.included():
        raise ValueError(f"rank {dist.get_rank()} is not in {ps}")
    return ps
