"""horovod.torch's collective functions: blocking, in-place, grouped and async forms, each
differentiable where Horovod's is (the backward passes are Horovod's)."""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from . import _ops
from ._core import _resolve_set
from ._ops import Average, Handle, Sum, run


class _Collective(torch.autograd.Function):
    """Autograd around a collective: forward(inputs) -> outputs, backward(grads) -> grads."""

    @staticmethod
    def forward(ctx, fwd, bwd, *inputs):
        ctx.bwd = bwd
        outs = fwd(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *ctx.bwd(grads))


def _differentiable(inputs, fwd, bwd):
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        out = _Collective.apply(fwd, bwd, *inputs)
        return list(out) if isinstance(out, tuple) else [out]
    return fwd(inputs)


def _resolve_op(average, op):
    if average is not None:
        warnings.warn("hvd.allreduce(average=...) is deprecated; use op=hvd.Average or hvd.Sum",
                      stacklevel=3)
        return Average if average else Sum
    return op or Average


# --- allreduce --------------------------------------------------------------------------------

def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    """Reduce every tensor of the list across ranks in one fused operation (Average unless
    op= says otherwise); the inputs are not modified."""
    ps, op = _resolve_set(process_set), _resolve_op(average, op)
    tensors = list(tensors)
    comp = compression or _NoCompression

    def fwd(inputs):
        packed = [comp.compress(t) for t in inputs]
        launched = _ops.launch_allreduce([p[0] for p in packed], op, prescale_factor,
                                         postscale_factor, ps, name, grouped=len(inputs) > 1)
        return [comp.decompress(r, p[1]) for r, p in zip(run(launched), packed)]

    def bwd(grads):
        return grouped_allreduce(list(grads), op=op, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, process_set=process_set)
    return _differentiable(tensors, fwd, bwd)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """Average (default) or reduce `tensor` across ranks; the input is not modified."""
    op = _resolve_op(average, op)
    return grouped_allreduce([tensor], None, name, compression, op, prescale_factor,
                             postscale_factor, process_set)[0]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=None):
    ps, op = _resolve_set(process_set), _resolve_op(average, op)
    tensors = list(tensors)
    return run(_ops.launch_allreduce(tensors, op, prescale_factor, postscale_factor, ps, name,
                                     grouped=len(tensors) > 1, outs=tensors))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    """Average (default) or reduce `tensor` across ranks, in place."""
    op = _resolve_op(average, op)
    return grouped_allreduce_([tensor], None, name, op, prescale_factor, postscale_factor,
                              process_set)[0]


def _async_allreduce(tensors, average, name, op, pre, post, process_set, inplace, single):
    ps, op = _resolve_set(process_set), _resolve_op(average, op)
    tensors = list(tensors)
    outs = tensors if inplace else None

    def start():
        return _ops.launch_allreduce(tensors, op, pre, post, ps, name, grouped=len(tensors) > 1,
                                     outs=outs)
    return Handle(start, name, (lambda r: r[0]) if single else None)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    return _async_allreduce([tensor], average, name, op, prescale_factor, postscale_factor,
                            process_set, False, True)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    return _async_allreduce([tensor], average, name, op, prescale_factor, postscale_factor,
                            process_set, True, True)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    return _async_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                            process_set, False, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=None):
    return _async_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                            process_set, True, False)


# --- allgather --------------------------------------------------------------------------------

def grouped_allgather(tensors, name=None, process_set=None):
    """Concatenate every rank's tensors along dimension 0 (first dimensions may differ)."""
    ps = _resolve_set(process_set)
    tensors = list(tensors)
    firsts_box = []

    def fwd(inputs):
        launched, firsts = _ops.launch_allgather(list(inputs), ps, name, len(inputs) > 1)
        firsts_box.append(firsts)
        return run(launched)

    def bwd(grads):
        reduced = grouped_allreduce(list(grads), op=Average, process_set=process_set)
        me, firsts = ps.rank(), firsts_box[0]
        out = []
        for k, g in enumerate(reduced):
            start = sum(f[k] for f in firsts[:me])
            out.append(g.narrow(0, start, firsts[me][k]))
        return out
    return _differentiable(tensors, fwd, bwd)


def allgather(tensor, name=None, process_set=None):
    return grouped_allgather([tensor], name, process_set)[0]


def allgather_async(tensor, name=None, process_set=None):
    ps = _resolve_set(process_set)
    return Handle(lambda: _ops.launch_allgather([tensor], ps, name)[0], name, lambda r: r[0])


def grouped_allgather_async(tensors, name=None, process_set=None):
    ps, tensors = _resolve_set(process_set), list(tensors)
    return Handle(lambda: _ops.launch_allgather(tensors, ps, name, len(tensors) > 1)[0], name)


# --- broadcast --------------------------------------------------------------------------------

def broadcast(tensor, root_rank, name=None, process_set=None):
    """root_rank's tensor on every rank; the input is not modified."""
    ps = _resolve_set(process_set)

    def fwd(inputs):
        return [run(_ops.launch_broadcast(inputs[0], root_rank, ps, name))]

    def bwd(grads):
        g = allreduce(grads[0], op=Average, process_set=process_set)
        return [g if dist.get_rank() == root_rank else g * 0]
    return _differentiable([tensor], fwd, bwd)[0]


def broadcast_(tensor, root_rank, name=None, process_set=None):
    ps = _resolve_set(process_set)
    return run(_ops.launch_broadcast(tensor, root_rank, ps, name, out=tensor))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    ps = _resolve_set(process_set)
    return Handle(lambda: _ops.launch_broadcast(tensor, root_rank, ps, name), name)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    ps = _resolve_set(process_set)
    return Handle(lambda: _ops.launch_broadcast(tensor, root_rank, ps, name, out=tensor), name)


# --- alltoall ---------------------------------------------------------------------------------

def alltoall(tensor, splits=None, name=None, process_set=None):
    """Scatter slices of dimension 0 to every rank and gather theirs. With `splits` (rows per
    destination rank), also return the rows received from each rank, as Horovod does."""
    ps = _resolve_set(process_set)
    received = []

    def fwd(inputs):
        out, recv = run(_ops.launch_alltoall(inputs[0], splits, ps, name))
        received.append(recv)
        return [out]

    def bwd(grads):
        return [alltoall(grads[0], splits=received[0], process_set=process_set)[0]]
    out = _differentiable([tensor], fwd, bwd)[0]
    return out if splits is None else (out, received[0])


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    ps = _resolve_set(process_set)
    convert = (lambda r: r[0]) if splits is None else None
    return Handle(lambda: _ops.launch_alltoall(tensor, splits, ps, name), name, convert)


# --- reducescatter ----------------------------------------------------------------------------

def grouped_reducescatter(tensors, name=None, compression=None, op=Average, process_set=None,
                          prescale_factor=1.0, postscale_factor=1.0):
    """Reduce across ranks and give each rank its slice of dimension 0 (the first
    `dim0 % size` ranks get one row more, as Horovod splits)."""
    ps, tensors = _resolve_set(process_set), list(tensors)

    def fwd(inputs):
        return run(_ops.launch_reducescatter(list(inputs), op, prescale_factor,
                                             postscale_factor, ps, name, len(inputs) > 1))

    def bwd(grads):
        factor = (ps.size() if op == Sum else 1) * prescale_factor * postscale_factor
        grads = [g * factor if factor != 1 else g for g in grads]
        return grouped_allgather(grads, process_set=process_set)
    return _differentiable(tensors, fwd, bwd)


def reducescatter(tensor, name=None, compression=None, op=Average, process_set=None,
                  prescale_factor=1.0, postscale_factor=1.0):
    return grouped_reducescatter([tensor], name, compression, op, process_set,
                                 prescale_factor, postscale_factor)[0]


def reducescatter_async(tensor, name=None, op=Average, process_set=None, prescale_factor=1.0,
                        postscale_factor=1.0):
    ps = _resolve_set(process_set)
    return Handle(lambda: _ops.launch_reducescatter([tensor], op, prescale_factor,
                                                    postscale_factor, ps, name),
                  name, lambda r: r[0])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=None,
                                prescale_factor=1.0, postscale_factor=1.0):
    ps, tensors = _resolve_set(process_set), list(tensors)
    return Handle(lambda: _ops.launch_reducescatter(tensors, op, prescale_factor,
                                                    postscale_factor, ps, name, True), name)


# --- sparse, handles, barrier, join -----------------------------------------------------------

def sparse_allreduce_async(tensor, name=None, op=Average, process_set=None):
    """Reduce a sparse tensor as Horovod does: allgather its indices and values (duplicates
    add up); returns a callable giving the result."""
    ps = _resolve_set(process_set)
    t = tensor.coalesce()
    indices = allgather(t.indices().t().contiguous(), process_set=process_set)
    values = allgather(t.values(), process_set=process_set)
    if op == Average:
        values = values / ps.size()
    result = torch.sparse_coo_tensor(indices.t(), values, t.shape, check_invariants=False)
    return lambda: result


def poll(handle) -> bool:
    return handle.poll()


def synchronize(handle):
    return handle.wait()


def barrier(process_set=None) -> None:
    ps = _resolve_set(process_set)
    if ps.size() > 1:
        _ops.barrier(ps.group)


def join(device=-1) -> int:
    _resolve_set(None)
    return _ops.join()


class _NoCompression:
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor
