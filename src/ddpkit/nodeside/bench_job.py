# ddpkit bench job: nccl-tests' measurements with torch.distributed, on NCCL or Gloo.
# Run by torchrun on every node (sent as a file; needs only torch). Configuration comes in
# $DDPKIT_BENCH as JSON; rank 0 prints one "DDPKIT_BENCH_ROW {json}" line per size and op,
# which `ddpkit bench` renders as nccl-tests' table. The helpers at the top are pure and are
# imported by ddpkit itself (this file imports torch only inside the job).
import json
import os
import sys
import time

# nccl-tests' type names -> torch dtype names, and their sizes in bytes
TYPES = {"int8": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "int64": ("int64", 8),
         "half": ("float16", 2), "float": ("float32", 4), "double": ("float64", 8),
         "bfloat16": ("bfloat16", 2)}
TYPE_ALIASES = {"float32": "float", "fp32": "float", "float16": "half", "fp16": "half",
                "bf16": "bfloat16", "float64": "double", "int": "int32", "char": "int8"}
OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "send_recv")
REDOPS = ("sum", "prod", "min", "max", "avg")
ROOTED = ("broadcast", "reduce")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")


def busbw_factor(op, n):
    """nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md)."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / float(n)
    return 1.0


def sizes(min_bytes, max_bytes, step_bytes, step_factor):
    out, size = [], min_bytes
    while size <= max_bytes:
        out.append(size)
        nxt = size * step_factor if step_factor > 1 else size + step_bytes
        if nxt <= size:
            break
        size = nxt
    return out


def layout(op, size, elt, n):
    """(count, send_elems, recv_elems, reported_bytes, alg_bytes) as nccl-tests sizes them:
    all_gather/reduce_scatter/all_to_all split `size` over the ranks (16-byte aligned chunks)
    and report the total buffer; the count column is the per-rank count."""
    count = size // elt
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        base = (count // n) & ~(max(1, 16 // elt) - 1)
        total = base * n
        send, recv = {"all_gather": (base, total), "reduce_scatter": (total, base),
                      "all_to_all": (total, total)}[op]
        return base, send, recv, total * elt, total * elt
    return count, count, count, count * elt, count * elt


# ---------------------------------------------------------------------------------------------
# The job (torch from here on)

def main():
    import torch
    import torch.distributed as dist

    cfg = json.loads(os.environ["DDPKIT_BENCH"])
    if cfg["backend"] == "auto":
        cfg["backend"] = "nccl" if torch.cuda.is_available() else "gloo"
    cuda = cfg["backend"] == "nccl"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(cfg["backend"])
    try:
        if cfg.get("pairs"):
            run_pairs(cfg, device)
        else:
            run_table(cfg, device)
    finally:
        barrier()
        dist.destroy_process_group()
    # See demo_job.py: nothing may hold the process group when the interpreter exits.
    import gc
    gc.collect()


def emit(kind, obj):
    sys.stdout.write("DDPKIT_BENCH_%s %s\n" % (kind, json.dumps(obj)))
    sys.stdout.flush()


class Bench:
    def __init__(self, cfg, device):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.cfg, self.device = torch, dist, cfg, device
        self.rank, self.n = dist.get_rank(), dist.get_world_size()
        self.cuda = device.type == "cuda"
        self.corrupt = cfg.get("corrupt")  # test hook: "op" whose first checked element to spoil

    def redop(self, name):
        R = self.dist.ReduceOp
        if name == "avg" and not self.cuda:
            return R.SUM  # Gloo has no AVG: sum, then divide (see finish())
        return {"sum": R.SUM, "prod": R.PRODUCT, "min": R.MIN, "max": R.MAX, "avg": getattr(R, "AVG", R.SUM)}[name]

    def filled(self, elems, dtype, redop, offset=0, rank=None):
        torch = self.torch
        rank = self.rank if rank is None else rank
        idx = torch.arange(offset, offset + elems, dtype=torch.int64)
        if redop == "prod":
            vals = 1 + (rank + idx) % 2
        else:
            vals = (rank + 1) + (idx % 5)
        return vals.to(dtype).to(self.device)

    def expected(self, op, redop, elems, dtype, root):
        # elems: the per-rank count (nccl-tests' count column)
        """What this rank must hold after one op (computed in float64 on the CPU)."""
        torch = self.torch
        n, r = self.n, self.rank

        def src(rank, count, offset):
            idx = torch.arange(offset, offset + count, dtype=torch.int64)
            if redop == "prod":
                return (1 + (rank + idx) % 2).double()
            return ((rank + 1) + (idx % 5)).double()

        def reduce(count, offset):
            parts = torch.stack([src(k, count, offset) for k in range(n)])
            if redop in ("sum", "avg"):
                out = parts.sum(0)
                return out / n if redop == "avg" else out
            return {"prod": parts.prod(0), "min": parts.min(0).values,
                    "max": parts.max(0).values}[redop]

        if op == "all_reduce":
            return reduce(elems, 0)
        if op == "reduce":
            return reduce(elems, 0) if r == root else None
        if op == "broadcast":
            return src(root, elems, 0)
        if op == "all_gather":
            return torch.cat([src(k, elems, 0) for k in range(n)])
        if op == "reduce_scatter":
            return reduce(elems, r * elems)
        if op == "all_to_all":
            return torch.cat([src(k, elems, r * elems) for k in range(n)])
        if op == "send_recv":
            return src((r - 1) % n, elems, 0)
        raise ValueError(op)

    def make(self, op, redop, dtype, count, send, recv, in_place, root):
        """(callable that runs one op, the tensor holding this rank's result)."""
        dist, torch, n, r = self.dist, self.torch, self.n, self.rank
        rop = self.redop(redop)
        if op in ("all_reduce", "broadcast", "reduce"):
            if op == "broadcast" and r != root:
                buf = torch.zeros(count, dtype=dtype, device=self.device)
            else:
                buf = self.filled(count, dtype, redop)
            if op == "all_reduce":
                return (lambda: dist.all_reduce(buf, op=rop)), buf
            if op == "reduce":
                return (lambda: dist.reduce(buf, dst=root, op=rop)), buf
            return (lambda: dist.broadcast(buf, src=root)), buf
        # torch 2.13 names them *_single (the *_tensor names warn); older torch has only those
        if op == "all_gather":
            out = torch.zeros(recv, dtype=dtype, device=self.device)
            inp = out[r * send:(r + 1) * send] if in_place else torch.empty(send, dtype=dtype, device=self.device)
            inp.copy_(self.filled(send, dtype, redop))
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return (lambda: gather(out, inp)), out
        if op == "reduce_scatter":
            inp = self.filled(send, dtype, redop)
            out = inp[r * recv:(r + 1) * recv] if in_place else torch.zeros(recv, dtype=dtype, device=self.device)
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            return (lambda: scatter(out, inp, op=rop)), out
        if op == "all_to_all":
            inp = self.filled(send, dtype, redop)
            out = torch.zeros(recv, dtype=dtype, device=self.device)
            return (lambda: dist.all_to_all_single(out, inp)), out
        if op == "send_recv":
            inp = self.filled(count, dtype, redop)
            out = inp if (in_place and n == 1) else torch.zeros(count, dtype=dtype, device=self.device)
            nxt, prv = (r + 1) % n, (r - 1) % n

            def sendrecv():
                reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, inp, nxt),
                                               dist.P2POp(dist.irecv, out, prv)])
                for q in reqs:
                    q.wait()
            return sendrecv, out
        raise ValueError(op)

    def time(self, run, iters):
        """Seconds per op on this rank: CUDA events on a GPU, barrier-aligned wall clock on CPU."""
        barrier()
        if self.cuda:
            torch = self.torch
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                run()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end) / 1e3 / iters
        t0 = time.perf_counter()
        for _ in range(iters):
            run()
        return (time.perf_counter() - t0) / iters

    def reduce_time(self, sec):
        """Across ranks: 0 rank 0, 1 mean, 2 min, 3 max (the slowest rank)."""
        torch, dist = self.torch, self.dist
        t = torch.tensor([sec], dtype=torch.float64, device=self.device)
        mode = self.cfg.get("average", 3)
        if mode == 0:
            dist.broadcast(t, src=0)
        elif mode == 1:
            dist.all_reduce(t)
            t /= self.n
        else:
            dist.all_reduce(t, op=dist.ReduceOp.MIN if mode == 2 else dist.ReduceOp.MAX)
        return t.item()

    def check(self, op, redop, dtype, count, send, recv, in_place, root):
        """Wrong elements across all ranks after one op on freshly filled buffers."""
        torch = self.torch
        run, out = self.make(op, redop, dtype, count, send, recv, in_place, root)
        run()
        if self.cuda:
            torch.cuda.synchronize()
        got = out.detach().to("cpu").double()
        if redop == "avg" and not self.cuda and op in REDUCING:
            got = got / self.n
        if self.corrupt == op and got.numel():
            got[0] += 1000  # the test hook: a result that is wrong on every rank
        want = self.expected(op, redop, count, dtype, root)
        wrong = 0
        if want is not None:
            tol = {torch.float16: 1e-2, torch.bfloat16: 3e-2, torch.float32: 1e-5}.get(dtype, 0.0)
            wrong = int(((got - want).abs() > tol * want.abs().clamp(min=1)).sum().item())
        w = torch.tensor([wrong], dtype=torch.int64, device=self.device)
        self.dist.all_reduce(w)
        return int(w.item())

    def row(self, op, tname, redop, size):
        torch = self.torch
        dtype = getattr(torch, TYPES[tname][0])
        elt = TYPES[tname][1]
        count, send, recv, reported, alg_bytes = layout(op, size, elt, self.n)
        root = self.cfg.get("root", 0) if op in ROOTED else -1
        result = {"op": op, "size": reported, "count": count, "type": tname,
                  "redop": redop if op in REDUCING else "none", "root": root}
        for key, in_place in (("oop", False), ("ip", True)):
            if count == 0:
                result[key] = {"time_us": 0.0, "algbw": 0.0, "busbw": 0.0, "wrong": 0}
                continue
            run, _ = self.make(op, redop, dtype, count, send, recv, in_place, max(root, 0))
            for _ in range(self.cfg["warmup"]):
                run()
            sec = self.reduce_time(self.time(run, self.cfg["iters"]))
            algbw = alg_bytes / 1e9 / sec if sec > 0 else 0.0
            wrong = 0
            for _ in range(self.cfg["check"]):
                wrong = self.check(op, redop, dtype, count, send, recv, in_place, max(root, 0))
                if wrong:
                    break
            result[key] = {"time_us": sec * 1e6, "algbw": algbw,
                           "busbw": algbw * busbw_factor(op, self.n),
                           "wrong": wrong if self.cfg["check"] else None}
        return result


def all_gather_object(obj):
    """Every rank's obj. torch's all_gather_object needs numpy, which `pip install torch` does
    not bring; ddpkit_objects.py (ddpkit/runtime/objects.py, written beside this file by
    `ddpkit bench`) needs torch only."""
    from ddpkit_objects import all_gather_object as gather

    return gather(obj)


def barrier():
    """One that names this rank's GPU on NCCL (ddpkit_objects.py, as above)."""
    from ddpkit_objects import barrier as named

    named()


def run_table(cfg, device):
    b = Bench(cfg, device)
    hosts = all_gather_object("%s %s" % (os.uname()[1], device))
    if b.rank == 0:
        emit("HEADER", {"world_size": b.n, "backend": b.dist.get_backend(), "hosts": hosts})
    for op in cfg["ops"]:
        for tname in cfg["types"]:
            for redop in (cfg["redops"] if op in REDUCING else ["sum"]):
                for size in cfg["sizes"]:
                    got = b.row(op, tname, redop, size)
                    if b.rank == 0:
                        emit("ROW", got)


def exchange(dist, buf, out, peer, first):
    """One message each way; the first of the pair sends first. send/recv block until done."""
    if first:
        dist.send(buf, peer)
        dist.recv(out, peer)
    else:
        dist.recv(out, peer)
        dist.send(buf, peer)
    if buf.is_cuda:
        import torch
        torch.cuda.synchronize()


def run_pairs(cfg, device):
    """Point-to-point bandwidth between every pair of nodes, one pair at a time: the two ranks
    exchange `size` bytes both ways while everyone else waits."""
    import torch
    import torch.distributed as dist

    rank, n = dist.get_rank(), dist.get_world_size()
    size, iters = cfg["pair_size"], cfg["pair_iters"]
    buf = torch.ones(size // 4, dtype=torch.float32, device=device)
    out = torch.empty_like(buf)
    hosts = all_gather_object(os.uname()[1])
    for i in range(n):
        for j in range(i + 1, n):
            barrier()
            sec = None
            if rank in (i, j):
                peer, first = (j, True) if rank == i else (i, False)
                exchange(dist, buf, out, peer, first)  # warm-up: connects the pair
                t0 = time.perf_counter()
                for _ in range(iters):
                    exchange(dist, buf, out, peer, first)
                sec = (time.perf_counter() - t0) / (2 * iters)  # one direction, one message
            if rank == i:
                emit("PAIR", {"a": i, "b": j, "host_a": hosts[i], "host_b": hosts[j],
                              "bytes": size, "time_us": sec * 1e6,
                              "gbps": size / 1e9 / sec if sec else 0.0})


if __name__ == "__main__":
    main()
