"""DistributedOptimizer, parameter/optimizer-state/object broadcasts and compression."""

from __future__ import annotations

import contextlib
import warnings

import torch
import torch.distributed as dist

from . import _ops, _wire
from ._api import _NoCompression, sparse_allreduce_async
from ._core import _check, _resolve_set, global_process_set
from ._ops import Adasum, Average, run


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
    none = _NoCompression
    fp16 = _FP16Compressor


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """A picklable object from root_rank, on every rank (no numpy needed)."""
    return _wire.broadcast_object(obj, root_rank, _resolve_set(process_set))


def allgather_object(obj, name=None, process_set=None) -> list:
    """Every rank's picklable object, in rank order (no numpy needed)."""
    return _wire.allgather_object(obj, _resolve_set(process_set))


def broadcast_parameters(params, root_rank, process_set=None) -> None:
    """Overwrite every rank's parameters with root_rank's, in place. `params` is a
    model.state_dict() or model.named_parameters(): one agreement for all, then one broadcast
    per tensor."""
    ps = _resolve_set(process_set)
    items = sorted(params.items()) if isinstance(params, dict) else list(params)
    tensors = [p for _, p in items if torch.is_tensor(p)]
    if not tensors or ps.size() == 1:
        return
    row = _wire.row_for("broadcast", root=root_rank, signature=_wire.signature_of(tensors))
    _ops.negotiate(row, ps, "broadcast_parameters")
    with torch.no_grad():
        for p in tensors:
            data = p.data if isinstance(p, torch.nn.Parameter) else p
            wire = _ops.to_wire(data)
            dist.broadcast(wire, src=root_rank, group=ps.group)
            if wire is not data:
                data.copy_(wire)


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=None) -> None:
    """Make every rank's optimizer state and options (learning rate, momentum, ...) root_rank's.
    A fresh optimizer's state is created first (zero gradients, one step), as Horovod does."""
    _check()
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        sparse = set()
        if model is not None:
            for m in model.modules():
                if isinstance(m, torch.nn.Embedding) and m.sparse:
                    sparse |= {id(p) for p in m.parameters()}
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p.data)
                    if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                        p.grad = p.grad.to_sparse()
        base = getattr(optimizer, "_hvd_base", None)
        (base.step.__get__(optimizer) if base else optimizer.step)()
    state = broadcast_object(optimizer.state_dict(), root_rank, process_set=process_set)
    if dist.get_rank() != root_rank:
        optimizer.load_state_dict(state)


def _named(optimizer, named_parameters):
    if named_parameters is None:
        return [(f"allreduce.noname.{i}.{j}", p) for i, g in enumerate(optimizer.param_groups)
                for j, p in enumerate(g["params"])]
    named = list(named_parameters)
    if any(not isinstance(x, tuple) for x in named):
        raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                         "usually model.named_parameters()")
    names = [k for k, _ in named]
    dups = sorted({k for k in names if names.count(k) > 1})
    if dups:
        raise ValueError(f"parameter names in named_parameters must be unique; duplicates: "
                         f"{', '.join(dups)}")
    every = {id(p) for g in optimizer.param_groups for p in g["params"]}
    missing = every - {id(p) for _, p in named}
    if missing:
        raise ValueError(f"named_parameters was given, but {len(missing)} parameter(s) of the "
                         "optimizer are not named in it")
    return named


class _DistributedMixin:
    """step() first averages the gradients of all ranks (fused: one agreement and one
    allreduce per dtype), as horovod.torch's DistributedOptimizer."""

    def _hvd_setup(self, named, compression, passes, op, predivide, sparse_as_dense,
                   process_set):
        if op == Adasum:
            raise NotImplementedError("ddpkit.horovod does not implement Adasum")
        self._parameter_names = {p: k for k, p in sorted(named, key=lambda kv: kv[0])}
        self._hvd_compression = compression
        self._hvd_passes, self._hvd_op, self._hvd_predivide = passes, op, predivide
        self._hvd_sparse_as_dense = sparse_as_dense
        self._hvd_set = process_set or global_process_set
        self._hvd_synchronized, self._hvd_should_sync = False, True

    def set_backward_passes_per_step(self, passes):
        self._hvd_passes = passes

    def synchronize(self):
        self._hvd_synchronized = True
        if not self._hvd_set.included():
            return  # this rank trains on its own: it is not in the optimizer's process set
        ps = _resolve_set(self._hvd_set)
        dense, sparse = [], []
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                if p.grad is None:  # another rank may have a gradient for it
                    p.grad = torch.zeros_like(p.data)
                (sparse if p.grad.is_sparse and not self._hvd_sparse_as_dense else dense).append(p)
        pre, post = 1.0, 1.0
        if self._hvd_op == Average:
            pre, post = 1.0 / self._hvd_predivide, self._hvd_predivide
        if dense:
            self._reduce_dense(dense, ps, pre, post)
        for p in sparse:
            reduced = sparse_allreduce_async(p.grad, op=self._hvd_op, process_set=ps)()
            p.grad.zero_().add_(reduced)

    def _reduce_dense(self, params, ps, pre, post):
        comp = self._hvd_compression
        grads = [p.grad.to_dense() if p.grad.is_sparse else p.grad for p in params]
        packed = [comp.compress(g) for g in grads]
        results = run(_ops.launch_allreduce([c for c, _ in packed], self._hvd_op, pre, post, ps,
                                            grouped=len(packed) > 1))
        for p, r, (_, ctx) in zip(params, results, packed):
            value = comp.decompress(r, ctx)
            if p.grad.is_sparse:
                p.grad.zero_().add_(value.to_sparse())
            else:
                p.grad.copy_(value)

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
                              "after optimizer.synchronize(). This can cause training "
                              "slowdown.", stacklevel=2)
            self.synchronize()
        self._hvd_synchronized = False
        return self._hvd_base.step(self, closure)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None):
    """Wrap an optimizer so that step() averages gradients across ranks first (after
    `backward_passes_per_step` local backward passes), as horovod.torch does."""
    _check()
    base = optimizer.__class__
    cls = type(f"Distributed{base.__name__}", (_DistributedMixin, base), {"_hvd_base": base})
    named = _named(optimizer, named_parameters)
    wrapped = cls.__new__(cls)
    wrapped.__dict__.update(optimizer.__dict__)  # same param groups, state and defaults
    wrapped._hvd_setup(named, compression, backward_passes_per_step, op,
                       gradient_predivide_factor, sparse_as_dense, process_set)
    return wrapped
