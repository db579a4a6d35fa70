"""The `horovod.torch` API that training scripts use, over torch.distributed.

`ddpkit launch --horovod train.py` runs an unmodified `import horovod.torch as hvd` script on
torchrun + NCCL/Gloo: this file is shipped to the nodes as `horovod/torch/__init__.py` (it needs
torch and the standard library only). In code, `import ddpkit.horovod as hvd` is the same API.

Semantics follow Horovod 0.28: allreduce defaults to Average; DistributedOptimizer averages
gradients once per `backward_passes_per_step` backward passes, in step() (or synchronize()),
with optional fp16 compression and gradient_predivide_factor; broadcast_parameters takes a
state_dict or named parameters. Not provided: Adasum, process sets, elastic mode, timeline.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import warnings

import torch
import torch.distributed as dist

# Reduction ops, as horovod.torch names them.
Average, Sum, Adasum, Min, Max, Product = "Average", "Sum", "Adasum", "Min", "Max", "Product"


class HorovodInternalError(RuntimeError):
    pass


class _NoneCompressor:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _FP16Compressor:
    @staticmethod
    def compress(tensor):
        if tensor.dtype.is_floating_point:
            return tensor.type(torch.float16), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.type(ctx) if ctx is not None else tensor


class Compression:
    none = _NoneCompressor
    fp16 = _FP16Compressor


_state = {"initialized": False, "owns_group": False}


def init(comm=None, process_sets=None) -> None:
    """Join the run started by torchrun / ddpkit launch (RANK, WORLD_SIZE, LOCAL_RANK, ...)."""
    if comm is not None or process_sets is not None:
        warnings.warn("ddpkit.horovod ignores comm= and process_sets=: every rank is in one group", stacklevel=2)
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if "MASTER_ADDR" not in os.environ:  # `python train.py`: a world of one
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), RANK="0",
                              WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=30))
        _state["owns_group"] = True
    _state["initialized"] = True


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shutdown() -> None:
    if _state["owns_group"] and dist.is_initialized():
        dist.destroy_process_group()
    _state.update(initialized=False, owns_group=False)
    import gc

    gc.collect()  # see ddpkit.runtime.shutdown: nothing may hold the group at interpreter exit


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


def nccl_built() -> bool:
    return dist.is_nccl_available()


def cuda_built() -> bool:
    return torch.version.cuda is not None


def rocm_built() -> bool:
    return torch.version.hip is not None


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def _reduce_op(op):
    if op in (None, Average, Sum):
        return dist.ReduceOp.SUM
    if op == Adasum:
        raise NotImplementedError("ddpkit.horovod does not implement Adasum; use op=hvd.Average")
    return {Min: dist.ReduceOp.MIN, Max: dist.ReduceOp.MAX, Product: dist.ReduceOp.PRODUCT}[op]


def _resolve_op(average, op):
    if average is not None:
        warnings.warn("hvd.allreduce(average=...) is deprecated; use op=hvd.Average or hvd.Sum", stacklevel=2)
        return Average if average else Sum
    return op or Average


def _allreduce_inplace(tensor, op, prescale_factor=1.0, postscale_factor=1.0):
    if prescale_factor != 1.0:
        tensor.mul_(prescale_factor)
    dist.all_reduce(tensor, op=_reduce_op(op))
    scale = postscale_factor / (size() if op == Average else 1)
    if scale != 1.0:
        if tensor.dtype.is_floating_point:
            tensor.mul_(scale)
        else:
            tensor.div_(size(), rounding_mode="floor")
    return tensor


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    """Average (default) or reduce `tensor` across all ranks, in place."""
    _check()
    return _allreduce_inplace(tensor, _resolve_op(average, op), prescale_factor, postscale_factor)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Average (default) or reduce across all ranks; the input is not modified."""
    _check()
    compressed, ctx = compression.compress(tensor)
    out = compressed.detach().clone()
    _allreduce_inplace(out, _resolve_op(average, op), prescale_factor, postscale_factor)
    return compression.decompress(out, ctx)


class _Handle:
    def __init__(self, value):
        self.value = value


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    return _Handle(allreduce(tensor, average, name, op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    return _Handle(allreduce_(tensor, average, name, op, prescale_factor, postscale_factor))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return [allreduce(t, average, name, compression, op, prescale_factor, postscale_factor)
            for t in tensors]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    return [allreduce_(t, average, name, op, prescale_factor, postscale_factor) for t in tensors]


def poll(handle) -> bool:
    return True


def synchronize(handle):
    return handle.value


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's tensor along dimension 0 (the first dimension may differ)."""
    _check()
    n = size()
    t = tensor.detach().contiguous()
    lengths = [torch.zeros(1, dtype=torch.int64, device=t.device) for _ in range(n)]
    dist.all_gather(lengths, torch.tensor([t.shape[0] if t.dim() else 1], device=t.device))
    longest = int(max(x.item() for x in lengths))
    padded = torch.zeros((longest, *t.shape[1:]) if t.dim() else (1,), dtype=t.dtype, device=t.device)
    padded[: t.shape[0] if t.dim() else 1] = t if t.dim() else t.reshape(1)
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded)
    return torch.cat([p[: int(k.item())] for p, k in zip(parts, lengths)])


def allgather_async(tensor, name=None, process_set=None):
    return _Handle(allgather(tensor, name))


def broadcast_(tensor, root_rank, name=None, process_set=None):
    _check()
    dist.broadcast(tensor, src=root_rank)
    return tensor


def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor on every rank; the input is not modified."""
    _check()
    out = tensor.detach().clone()
    dist.broadcast(out, src=root_rank)
    return out


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    return _Handle(broadcast(tensor, root_rank, name))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _Handle(broadcast_(tensor, root_rank, name))


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatter slices of dimension 0 to every rank and gather theirs. With `splits` (rows per
    destination rank), also return the rows received from each rank, as Horovod does."""
    _check()
    n = size()
    t = tensor.detach().contiguous()
    if splits is None:
        if t.shape[0] % n:
            raise ValueError(f"alltoall: dimension 0 ({t.shape[0]}) does not split over {n} ranks")
        send = [t.shape[0] // n] * n
    else:
        send = [int(x) for x in (splits.tolist() if torch.is_tensor(splits) else splits)]
    send_t = torch.tensor(send, dtype=torch.int64, device=t.device)
    recv_t = torch.empty_like(send_t)
    dist.all_to_all_single(recv_t, send_t)
    recv = [int(x) for x in recv_t.tolist()]
    out = torch.empty((sum(recv), *t.shape[1:]), dtype=t.dtype, device=t.device)
    dist.all_to_all_single(out, t, output_split_sizes=recv, input_split_sizes=send)
    if splits is None:
        return out
    return out, recv_t.cpu().to(torch.int32)


def barrier(process_set=None) -> None:
    _check()
    dist.barrier()


def join(device=-1) -> int:
    barrier()
    return size() - 1


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """A picklable object from root_rank, on every rank."""
    _check()
    holder = [obj if rank() == root_rank else None]
    dist.broadcast_object_list(holder, src=root_rank)
    return holder[0]


def allgather_object(obj, name=None, process_set=None):
    _check()
    out = [None] * size()
    dist.all_gather_object(out, obj)
    return out


def broadcast_parameters(params, root_rank) -> None:
    """Overwrite every rank's parameters with root_rank's, in place. `params` is a
    model.state_dict() or model.named_parameters()."""
    _check()
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    for _, p in items:
        if torch.is_tensor(p):
            with torch.no_grad():
                dist.broadcast(p.data if hasattr(p, "data") else p, src=root_rank)


def broadcast_optimizer_state(optimizer, root_rank, model=None) -> None:
    """Make every rank's optimizer state (moments, step counts, hyper-parameters) root_rank's."""
    _check()
    state = broadcast_object(optimizer.state_dict(), root_rank)
    if rank() != root_rank:
        optimizer.load_state_dict(state)


def _distributed_optimizer_class(base):
    class _DistributedOptimizer(base):
        """`base` whose step() first averages the gradients of all ranks."""

        def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor):
            if op == Adasum:
                raise NotImplementedError("ddpkit.horovod does not implement Adasum")
            names = {}
            if named_parameters is not None:
                for name, p in named_parameters:
                    names[p] = name
            self._hvd_names = names
            self._hvd_compression = compression
            self._hvd_passes = backward_passes_per_step
            self._hvd_op = op
            self._hvd_predivide = gradient_predivide_factor
            self._hvd_synchronized = False
            self._hvd_should_sync = True

        def set_backward_passes_per_step(self, passes):
            self._hvd_passes = passes

        def synchronize(self):
            for group in self.param_groups:
                for p in group["params"]:
                    if not p.requires_grad:
                        continue
                    if p.grad is None:  # another rank may have a gradient for it
                        p.grad = torch.zeros_like(p.data)
                    compressed, ctx = self._hvd_compression.compress(p.grad)
                    if self._hvd_op == Average:
                        pre, post = 1.0 / self._hvd_predivide, self._hvd_predivide
                    else:
                        pre, post = 1.0, 1.0
                    _allreduce_inplace(compressed, self._hvd_op, pre, post)
                    p.grad.copy_(self._hvd_compression.decompress(compressed, ctx))
            self._hvd_synchronized = True

        @contextlib.contextmanager
        def skip_synchronize(self):
            self._hvd_should_sync = False
            try:
                yield
            finally:
                self._hvd_should_sync = True

        def step(self, closure=None):
            if self._hvd_should_sync:
                if self._hvd_synchronized:
                    warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                                  "after optimizer.synchronize()", stacklevel=2)
                self.synchronize()
            self._hvd_synchronized = False
            return super().step(closure)

    _DistributedOptimizer.__name__ = f"Distributed{base.__name__}"
    return _DistributedOptimizer


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wrap an optimizer so that step() averages gradients across ranks first (after
    `backward_passes_per_step` local backward passes), as horovod.torch does."""
    _check()
    cls = _distributed_optimizer_class(optimizer.__class__)
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)  # same param groups, state and defaults
    wrapped._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                       gradient_predivide_factor)
    return wrapped
