"""What the ranks tell each other before a collective, and how tensors travel.

Horovod's coordinator checks that every rank asked for the same operation on tensors of the
same type and shape before running it; torch.distributed does not, and ranks that disagree hang
until the 30-minute timeout or get garbage. Here every collective first all-gathers one small
row of integers per rank (operation, dtype, device, root, reduction, name, shape): a mismatch
becomes the same error on every rank naming the ranks and their tensors. The same rows carry
what hvd.join() needs (which ranks have joined) and allgather's first dimensions, so allgather
and join cost no extra exchange. DDPKIT_HVD_CHECK=0 skips the rows (benchmarks/runtime_overhead
measures the cost; README "Training styles").

Objects travel as pickled bytes in uint8 tensors (torch's object collectives need numpy).
"""

from __future__ import annotations

import ctypes
import os
import pickle
import zlib

import torch
import torch.distributed as dist

ROW, DIMS = 16, 8
KINDS = ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "join",
         "grouped_allreduce", "grouped_allgather", "grouped_reducescatter", "barrier")
JOIN = KINDS.index("join") + 1
DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
          torch.complex128)
# What Gloo cannot carry, and what it travels as instead (and is cast back from).
GLOO_CASTS = {torch.int16: torch.int32}


class MismatchError(RuntimeError):
    """Ranks asked for different collectives (Horovod: 'Mismatched ... operations')."""


def checking() -> bool:
    return os.environ.get("DDPKIT_HVD_CHECK", "1") != "0"


def name_code(name) -> int:
    return zlib.crc32(name.encode()) + 1 if name else 0


def describe(dtype, shape) -> str:
    return f"{str(dtype).replace('torch.', '')}[{', '.join(str(d) for d in shape)}]"


def row_for(kind: str, tensor=None, *, root=-1, op=0, name=None, signature=None) -> list[int]:
    """One rank's row. `signature` (grouped operations): a hash of every tensor's dtype and
    shape in place of one tensor's."""
    row = [0] * ROW
    row[0] = KINDS.index(kind) + 1
    row[3], row[4], row[5] = root, op, name_code(name)
    if tensor is not None:
        row[1] = DTYPES.index(tensor.dtype) + 1 if tensor.dtype in DTYPES else 99
        row[2] = 1 if tensor.is_cuda else 0
        row[6] = tensor.dim()
        dims = list(tensor.shape)
        if len(dims) > DIMS:  # fold the trailing dimensions into the last slot
            tail = 1
            for d in dims[DIMS - 1:]:
                tail *= d
            dims = dims[:DIMS - 1] + [tail]
        row[8:8 + len(dims)] = dims
    if signature is not None:
        row[7] = signature
    return row


def signature_of(tensors, skip_first_dim=False) -> int:
    text = ";".join(f"{t.dtype}{list(t.shape)[1 if skip_first_dim else 0:]}{t.is_cuda}"
                    for t in tensors)
    return zlib.crc32(text.encode())


def meta_device(group):
    backend = dist.get_backend(group)
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else "cpu"


def all_gather_tensor(out, inp, group, async_op=False):
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(out, inp, group=group, async_op=async_op)


def reduce_scatter_tensor(out, inp, op, group, async_op=False):
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(out, inp, op=op, group=group, async_op=async_op)


def exchange(row: list[int], ps) -> list[list[int]]:
    """Every member's row, in process-set rank order."""
    n = ps.size()
    if n == 1:
        return [row]
    mine = torch.tensor(row, dtype=torch.int64, device=meta_device(ps.group))
    out = torch.empty(n * ROW, dtype=torch.int64, device=mine.device)
    all_gather_tensor(out, mine, ps.group)
    flat = out.tolist()
    return [flat[i * ROW:(i + 1) * ROW] for i in range(n)]


def _shape(row) -> list[int]:
    return row[8:8 + min(row[6], DIMS)]


def _text(row) -> str:
    if row[0] == JOIN:
        return "joined"
    kind = KINDS[row[0] - 1]
    if row[1] == 0:
        return kind
    dtype = DTYPES[row[1] - 1] if row[1] <= len(DTYPES) else "other"
    where = "cuda" if row[2] else "cpu"
    root = f" root={row[3]}" if kind == "broadcast" else ""
    return f"{kind} {describe(dtype, _shape(row))} on {where}{root}"


def validate(rows: list[list[int]], ps, what: str) -> None:
    """Raise the same MismatchError on every rank when the active rows disagree."""
    active = [(i, r) for i, r in enumerate(rows) if r[0] != JOIN]
    if len(active) < 2:
        return
    first = active[0][1]
    kind = KINDS[first[0] - 1]
    free_first = kind in ("allgather", "alltoall")

    def key(r):
        shape = _shape(r)[1:] if free_first else _shape(r)
        return (r[0], r[1], r[2], r[3], r[4], r[6], r[7], tuple(shape))

    keys = {key(r) for _, r in active}
    names = {r[5] for _, r in active if r[5]}
    if len(keys) == 1 and len(names) <= 1:
        return
    world = ps.ranks
    per_rank = ", ".join(f"rank {world[i]}: {_text(r)}" for i, r in active)
    problem = "tensor names" if len(keys) == 1 else "the operation, type or shape"
    raise MismatchError(f"hvd.{what}: ranks disagree on {problem} ({per_rank}); every rank "
                        "must call the same collectives in the same order with tensors of the "
                        "same type and shape")


def joined(rows) -> list[int]:
    return [i for i, r in enumerate(rows) if r[0] == JOIN]


def wire_dtype(tensor):
    return GLOO_CASTS.get(tensor.dtype) if not tensor.is_cuda else None


# --- objects ----------------------------------------------------------------------------------

def _to_bytes(obj, device) -> torch.Tensor:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).to(device)


def _loads(t: torch.Tensor):
    t = t.cpu().contiguous()  # read its memory directly: tensor.numpy() would need numpy
    return pickle.loads(ctypes.string_at(t.data_ptr(), t.numel()) if t.numel() else b"")


def broadcast_object(obj, root: int, ps):
    """`obj` of the process-set member with global rank `root`, on every member."""
    if ps.size() == 1:
        return obj
    device = meta_device(ps.group)
    me = dist.get_rank()
    payload = _to_bytes(obj, device) if me == root else None
    length = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64,
                          device=device)
    dist.broadcast(length, src=root, group=ps.group)
    buf = payload if payload is not None else torch.empty(int(length.item()), dtype=torch.uint8,
                                                          device=device)
    dist.broadcast(buf, src=root, group=ps.group)
    return obj if me == root else _loads(buf)


def allgather_object(obj, ps) -> list:
    """Every member's `obj`, in process-set rank order."""
    if ps.size() == 1:
        return [obj]
    device = meta_device(ps.group)
    payload = _to_bytes(obj, device)
    n = ps.size()
    lengths = torch.empty(n, dtype=torch.int64, device=device)
    all_gather_tensor(lengths, torch.tensor([payload.numel()], dtype=torch.int64, device=device),
                      ps.group)
    sizes = [int(x) for x in lengths.tolist()]
    longest = max(sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=device)
    padded[:payload.numel()] = payload
    out = torch.empty(n * longest, dtype=torch.uint8, device=device)
    all_gather_tensor(out, padded, ps.group)
    return [_loads(out[i * longest:i * longest + s]) for i, s in enumerate(sizes)]
