"""The collectives: each is a launch (agree with the other ranks, start the torch.distributed
operation) that returns the started works and a finish step; blocking calls wait at once, the
async API hands out a Handle. Async operations start in issue order when first polled or
synchronized, so that ranks that issue the same operations run them in the same order."""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _wire
from ._core import global_process_set

Average, Sum, Adasum, Min, Max, Product = "Average", "Sum", "Adasum", "Min", "Max", "Product"
_OPS = (Average, Sum, Adasum, Min, Max, Product)
_pending: list = []
_inflight: set = set()
_join = {"seen": frozenset()}  # global ranks seen joined at the last global exchange


def op_code(op) -> int:
    return _OPS.index(op) + 1


def reduce_op(op):
    if op in (Average, Sum):
        return dist.ReduceOp.SUM
    if op == Adasum:
        raise NotImplementedError("ddpkit.horovod does not implement Adasum; use op=hvd.Average")
    return {Min: dist.ReduceOp.MIN, Max: dist.ReduceOp.MAX, Product: dist.ReduceOp.PRODUCT}[op]


def negotiate(row, ps, what):
    """The rows of every member (None when checks are off), validated; joined ranks noted."""
    if not _wire.checking() and ps.size() > 1:
        return None
    rows = _wire.exchange(row, ps)
    if ps is global_process_set:
        _join["seen"] = frozenset(_wire.joined(rows))
    _wire.validate(rows, ps, what)
    return rows


def refuse_if_joined(rows, ps, what):
    gone = _wire.joined(rows) if rows else []
    if gone:
        ranks = ", ".join(str(ps.ranks[i]) for i in gone)
        raise RuntimeError(f"hvd.{what}: rank(s) {ranks} have called hvd.join(); after a join "
                           "only allreduce can run until every rank has joined")


def scale(t, factor):
    """t * factor in t's dtype; integers scale in float64 and truncate, float16/bfloat16 on
    the CPU in float32, as Horovod does."""
    if factor == 1.0:
        return t
    if t.dtype in (torch.float16, torch.bfloat16) and not t.is_cuda:
        return (t.float() * factor).to(t.dtype)
    if t.dtype.is_floating_point or t.is_complex():
        return t * factor
    return (t.double() * factor).to(t.dtype)


def to_wire(t):
    cast = _wire.wire_dtype(t)
    return t.to(cast) if cast is not None else t


class Launched:
    def __init__(self, works, finish):
        self.works, self.finish = [w for w in works if w is not None], finish

    def ready(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def wait(self):
        for w in self.works:
            w.wait()
        return self.finish()


def run(launched: Launched):
    return launched.wait()


# --- allreduce --------------------------------------------------------------------------------

def launch_allreduce(tensors, op, pre, post, ps, name=None, grouped=False, outs=None):
    if op == Adasum:
        raise NotImplementedError("ddpkit.horovod does not implement Adasum; use op=hvd.Average")
    if grouped:
        row = _wire.row_for("grouped_allreduce", op=op_code(op), name=name,
                            signature=_wire.signature_of(tensors))
    else:
        row = _wire.row_for("allreduce", tensors[0], op=op_code(op), name=name)
    rows = negotiate(row, ps, "grouped_allreduce" if grouped else "allreduce")
    flats, layout = _flatten([to_wire(scale(t, pre)) for t in tensors])
    if rows and _wire.joined(rows) and grouped:
        _wire.allgather_object([(str(f.dtype), f.numel()) for f in flats], ps)
    n = ps.size()
    works = [dist.all_reduce(f, op=reduce_op(op), group=ps.group, async_op=True) if n > 1
             else None for f in flats]
    post = post / n if op == Average else post

    def finish():
        results = [scale(r.to(t.dtype), post) for r, t in zip(_unflatten(flats, layout), tensors)]
        if outs is None:
            return results
        for o, r in zip(outs, results):
            o.copy_(r)
        return outs
    return Launched(works, finish)


def _flatten(tensors):
    """One flat buffer per dtype (tensor fusion), in first-appearance order; a single tensor
    travels as itself (a copy)."""
    if len(tensors) == 1:
        return [tensors[0].detach().clone().contiguous()], [(0, 0, tensors[0].shape)]
    order, groups = [], {}
    for t in tensors:
        if t.dtype not in groups:
            groups[t.dtype] = []
            order.append(t.dtype)
        groups[t.dtype].append(t)
    flats = [torch.cat([t.detach().reshape(-1) for t in groups[d]]) for d in order]
    layout, offsets = [], dict.fromkeys(order, 0)
    for t in tensors:
        layout.append((order.index(t.dtype), offsets[t.dtype], t.shape))
        offsets[t.dtype] += t.numel()
    return flats, layout


def _unflatten(flats, layout):
    if len(layout) == 1 and len(flats) == 1 and flats[0].shape == layout[0][2]:
        return [flats[0]]
    return [flats[i].narrow(0, off, _numel(shape)).view(shape) for i, off, shape in layout]


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


# --- allgather --------------------------------------------------------------------------------

def launch_allgather(tensors, ps, name=None, grouped=False):
    tensors = [t.reshape(1) if t.dim() == 0 else t for t in tensors]
    if grouped:
        row = _wire.row_for("grouped_allgather", name=name,
                            signature=_wire.signature_of(tensors, skip_first_dim=True))
    else:
        row = _wire.row_for("allgather", tensors[0], name=name)
    rows = negotiate(row, ps, "grouped_allgather" if grouped else "allgather")
    refuse_if_joined(rows, ps, "allgather")
    n = ps.size()
    if rows is not None and not grouped:
        firsts = [[r[8]] for r in rows]
    elif n > 1:
        firsts = _wire.allgather_object([t.shape[0] for t in tensors], ps)
    else:
        firsts = [[t.shape[0] for t in tensors]]
    works, bufs = [], []
    for k, t in enumerate(tensors):
        longest = max(f[k] for f in firsts)
        src = to_wire(t.detach()).contiguous()
        if src.shape[0] < longest:
            pad = torch.zeros((longest - src.shape[0], *src.shape[1:]), dtype=src.dtype,
                              device=src.device)
            src = torch.cat([src, pad])
        out = torch.empty((n * longest, *src.shape[1:]), dtype=src.dtype, device=src.device)
        works.append(_wire.all_gather_tensor(out, src, ps.group, async_op=True) if n > 1 else None)
        if n == 1:
            out.copy_(src)
        bufs.append((out, longest))

    def finish():
        results = []
        for k, (out, longest) in enumerate(bufs):
            parts = [out[i * longest:i * longest + firsts[i][k]] for i in range(n)]
            results.append(torch.cat(parts).to(tensors[k].dtype))
        return results
    return Launched(works, finish), firsts


# --- broadcast --------------------------------------------------------------------------------

def launch_broadcast(tensor, root, ps, name=None, out=None):
    if root not in ps.ranks:
        raise ValueError(f"hvd.broadcast: root_rank {root} is not in {ps}")
    rows = negotiate(_wire.row_for("broadcast", tensor, root=root, name=name), ps, "broadcast")
    refuse_if_joined(rows, ps, "broadcast")
    buf = to_wire(tensor.detach()).clone().contiguous()
    work = dist.broadcast(buf, src=root, group=ps.group, async_op=True) if ps.size() > 1 else None

    def finish():
        result = buf.to(tensor.dtype)
        if out is None:
            return result
        out.copy_(result)
        return out
    return Launched([work], finish)


# --- alltoall ---------------------------------------------------------------------------------

def _send_splits(tensor, splits, n):
    if splits is None:
        if tensor.dim() == 0 or tensor.shape[0] % n:
            first = tensor.shape[0] if tensor.dim() else 0
            raise ValueError(f"hvd.alltoall: dimension 0 ({first}) does not split evenly over "
                             f"{n} ranks; pass splits=")
        return [tensor.shape[0] // n] * n
    if torch.is_tensor(splits):
        if splits.dtype.is_floating_point or splits.dtype.is_complex:
            raise ValueError("hvd.alltoall: splits must be a tensor of 32-bit integers")
        splits = splits.tolist()
    send = [int(x) for x in splits]
    if len(send) != n or any(x < 0 for x in send):
        raise ValueError(f"hvd.alltoall: splits needs {n} non-negative entries, got {send}")
    if sum(send) > (tensor.shape[0] if tensor.dim() else 0):
        raise ValueError(f"hvd.alltoall: splits sum to {sum(send)}, more than the tensor's "
                         f"first dimension")
    return send


def launch_alltoall(tensor, splits, ps, name=None):
    n = ps.size()
    send = _send_splits(tensor, splits, n)
    rows = negotiate(_wire.row_for("alltoall", tensor, name=name), ps, "alltoall")
    refuse_if_joined(rows, ps, "alltoall")
    src = to_wire(tensor.detach()).contiguous()[:sum(send)]
    if n == 1:
        recv = send
        out = src.clone()
        work = None
    else:
        dev = _wire.meta_device(ps.group)
        send_t = torch.tensor(send, dtype=torch.int64, device=dev)
        recv_t = torch.empty_like(send_t)
        dist.all_to_all_single(recv_t, send_t, group=ps.group)
        recv = [int(x) for x in recv_t.tolist()]
        out = torch.empty((sum(recv), *src.shape[1:]), dtype=src.dtype, device=src.device)
        work = dist.all_to_all_single(out, src, output_split_sizes=recv, input_split_sizes=send,
                                      group=ps.group, async_op=True)

    def finish():
        return out.to(tensor.dtype), torch.tensor(recv, dtype=torch.int32)
    return Launched([work], finish)


# --- reducescatter ----------------------------------------------------------------------------

def launch_reducescatter(tensors, op, pre, post, ps, name=None, grouped=False):
    if op == Adasum:
        raise RuntimeError("hvd.reducescatter does not support Adasum")
    if any(t.dim() == 0 for t in tensors):
        raise ValueError("hvd.reducescatter needs tensors of at least one dimension")
    if grouped:
        row = _wire.row_for("grouped_reducescatter", op=op_code(op), name=name,
                            signature=_wire.signature_of(tensors))
    else:
        row = _wire.row_for("reducescatter", tensors[0], op=op_code(op), name=name)
    rows = negotiate(row, ps, "reducescatter")
    refuse_if_joined(rows, ps, "reducescatter")
    n, me = ps.size(), ps.rank()
    post = post / n if op == Average else post
    works, plans = [], []
    for t in tensors:
        src = to_wire(scale(t.detach(), pre)).contiguous()
        d0 = src.shape[0]
        counts = [d0 // n + (1 if i < d0 % n else 0) for i in range(n)]
        if n == 1:
            out, whole = src.clone(), False
        elif len(set(counts)) == 1:
            out, whole = torch.empty((counts[me], *src.shape[1:]), dtype=src.dtype,
                                     device=src.device), False
            works.append(_wire.reduce_scatter_tensor(out, src, reduce_op(op), ps.group, True))
        else:  # uneven split: reduce everything, keep this rank's rows
            out, whole = src.clone(), True
            works.append(dist.all_reduce(out, op=reduce_op(op), group=ps.group, async_op=True))
        plans.append((t, out, whole, sum(counts[:me]), counts[me]))

    def finish():
        results = []
        for t, out, whole, start, count in plans:
            mine = out.narrow(0, start, count) if whole else out
            results.append(scale(mine.to(t.dtype), post))
        return results
    return Launched(works, finish)


# --- join -------------------------------------------------------------------------------------

def barrier(group=None) -> None:
    """dist.barrier() naming this rank's GPU on NCCL (torch 2.11 warns on each call that it
    guesses the device). The shim ships to nodes on its own, so it keeps its own copy of
    ddpkit/runtime/objects.py's barrier."""
    if "nccl" in str(dist.get_backend(group)).lower():
        dist.barrier(group=group, device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier(group=group)


def join() -> int:
    """Wait, taking part in the other ranks' allreduces with zeros, until every rank has
    joined; return the rank that joined last."""
    ps = global_process_set
    if ps.size() == 1:
        return 0
    if not _wire.checking():
        barrier()
        return ps.size() - 1
    before = _join["seen"]
    while True:
        rows = _wire.exchange(_wire.row_for("join"), ps)
        now = frozenset(_wire.joined(rows))
        _join["seen"] = now
        if len(now) == ps.size():
            _join["seen"] = frozenset()
            newly = sorted(now - before) or sorted(now)
            return ps.ranks[newly[-1]]
        before = now
        _serve(rows, ps)


def _serve(rows, ps) -> None:
    """A joined rank's part in an operation of the active ranks: zeros for an allreduce."""
    active = [r for r in rows if r[0] != _wire.JOIN]
    first = active[0]
    kind = _wire.KINDS[first[0] - 1]
    try:
        _wire.validate(rows, ps, kind)
    except _wire.MismatchError:
        return  # the active ranks raise; there is nothing to take part in
    op = _OPS[first[4] - 1] if first[4] else Sum
    if kind == "allreduce":
        dtype = _wire.DTYPES[first[1] - 1]
        device = "cuda" if first[2] else "cpu"
        zeros = to_wire(torch.zeros(_numel(first[8:8 + min(first[6], _wire.DIMS)]),
                                    dtype=dtype, device=device))
        dist.all_reduce(zeros, op=reduce_op(op))
    elif kind == "grouped_allreduce":
        specs = [s for s in _wire.allgather_object(None, ps) if s is not None][0]
        for dtype_name, numel in specs:
            dtype = getattr(torch, dtype_name.replace("torch.", ""))
            dist.all_reduce(torch.zeros(numel, dtype=dtype), op=reduce_op(op))


# --- async handles ----------------------------------------------------------------------------

class Handle:
    """An operation issued with *_async: it starts (in issue order) at its first poll() or
    synchronize(); synchronize() returns its result."""

    def __init__(self, start, name=None, convert=None):
        if name is not None and name in _inflight:
            raise ValueError(f"an operation named {name!r} is already in flight; names of "
                             "concurrent operations must be unique")
        self._start, self._launched, self._name, self._convert = start, None, name, convert
        self._done, self._result = False, None
        if name is not None:
            _inflight.add(name)
        _pending.append(self)

    def start(self) -> None:
        if self._launched is not None or self._done:
            return
        for earlier in list(_pending):
            if earlier is self:
                break
            earlier.start()
        _pending.remove(self)
        try:
            self._launched = self._start()
        except BaseException:
            self._release()
            raise

    def poll(self) -> bool:
        self.start()
        return self._done or self._launched.ready()

    def wait(self):
        if not self._done:
            self.start()
            try:
                result = self._launched.wait()
            finally:
                self._release()
            self._result = self._convert(result) if self._convert else result
            self._done = True
        return self._result

    def _release(self) -> None:
        self._done = True if self._launched is None else self._done
        if self._name is not None:
            _inflight.discard(self._name)


def forget_pending() -> None:
    _pending.clear()
    _inflight.clear()
    _join["seen"] = frozenset()
