"""What ddpkit.horovod adds beyond plain torch.distributed, on 2 real ranks under `ddpkit launch
--horovod` (the shipped `horovod.torch`), without numpy (blocked below, as on nodes with `pip install torch` only); prints 'OK <what> rank=R' per check.
Ends without hvd.shutdown(): the shim cleans up at exit by itself."""
import sys

sys.modules["numpy"] = None  # `import numpy` fails, as where numpy is not installed

import horovod.torch as hvd  # noqa: E402  (the shim `ddpkit launch --horovod` ships)
import torch  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, "run with 2 ranks"
assert "hvdshim" in hvd.__file__, hvd.__file__


def check(name, cond):
    assert cond, f"{name} failed on rank {r}"
    print(f"OK {name} rank={r}", flush=True)


def raises(fn, exc):
    try:
        fn()
    except exc as e:
        return str(e)
    return None


# Validation: a mismatch is an error on every rank that names the ranks and shapes.
msg = raises(lambda: hvd.allreduce(torch.ones(3 + r)), RuntimeError)
check("mismatched shapes", msg and "rank 0: allreduce float32[3]" in msg
      and "rank 1: allreduce float32[4]" in msg)
msg = raises(lambda: hvd.allgather(torch.ones(2, dtype=torch.int32 if r else torch.float32)),
             RuntimeError)
check("mismatched dtypes", msg and "int32" in msg and "float32" in msg)
check("mismatched roots", raises(lambda: hvd.broadcast(torch.ones(2), root_rank=r), RuntimeError))
check("still in step after errors", hvd.allreduce(torch.tensor([float(r)]), op=hvd.Sum).item() == 1)

# Dtypes Gloo lacks travel cast, and come back in their own dtype.
s = torch.tensor([r + 1, 7], dtype=torch.int16)
g = hvd.allgather(s)
check("int16", g.dtype == torch.int16 and g.tolist() == [1, 7, 2, 7]
      and hvd.allreduce(s, op=hvd.Sum).tolist() == [3, 14]
      and hvd.broadcast(s, root_rank=1).tolist() == [2, 7])

# Process sets are process groups.
evens, odds = hvd.add_process_set([0]), hvd.add_process_set([1])
mine = evens if r == 0 else odds
check("process sets", mine.included() and mine.size() == 1 and mine.rank() == 0
      and hvd.allreduce(torch.tensor([5.0 + r]), op=hvd.Sum, process_set=mine).item() == 5 + r)
check("process set of all", hvd.allgather(torch.tensor([r]), process_set=hvd.global_process_set)
      .tolist() == [0, 1] and raises(lambda: hvd.add_process_set([0, 1]), ValueError))
check("remove_process_set", hvd.remove_process_set(evens) and hvd.remove_process_set(odds))

# Differentiable collectives (Horovod's gradients).
x = torch.ones(4, requires_grad=True)
hvd.allreduce(x, op=hvd.Sum).sum().backward()
check("allreduce grad", x.grad.tolist() == [2.0] * 4)
x = torch.ones(r + 1, 2, requires_grad=True)
hvd.allgather(x).sum().backward()
check("allgather grad", x.grad.shape == (r + 1, 2) and x.grad.eq(1).all().item())
x = torch.ones(3, requires_grad=True)
hvd.broadcast(x, root_rank=0).sum().backward()
check("broadcast grad", x.grad.tolist() == ([1.0] * 3 if r == 0 else [0.0] * 3))
x = torch.arange(4.0, requires_grad=True)
hvd.alltoall(x).sum().backward()
check("alltoall grad", x.grad.tolist() == [1.0] * 4)
x = torch.ones(4, 2, requires_grad=True)
y = hvd.reducescatter(x, op=hvd.Sum)
y.sum().backward()
check("reducescatter + grad", y.shape == (2, 2) and y.eq(2).all().item()
      and x.grad.eq(2).all().item())

# reducescatter splits like Horovod: the first dim0 % size ranks get one row more.
parts = hvd.grouped_reducescatter([torch.ones(3, 1), torch.ones(4)], op=hvd.Average)
check("grouped_reducescatter", [tuple(p.shape) for p in parts] == ([(2, 1), (2,)] if r == 0
                                                                   else [(1, 1), (2,)]))

# Pre/post scaling, and integers scale in float64 and truncate, as Horovod.
check("prescale/postscale", hvd.allreduce(torch.tensor([2.0]), op=hvd.Sum, prescale_factor=0.5,
                                          postscale_factor=3.0).item() == 6.0
      and hvd.allreduce(torch.tensor([3]), op=hvd.Sum, postscale_factor=0.5).item() == 3)

# Async handles: issued, then synchronized; names in flight are unique.
ts = [torch.full((k + 1,), float(r + 1)) for k in range(6)]
handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"t{k}") for k, t in enumerate(ts)]
check("duplicate name", raises(lambda: hvd.allreduce_async(ts[0], name="t0"), ValueError))
check("async fused", all(hvd.synchronize(h).eq(3).all().item() for h in handles)
      and all(t.eq(3).all().item() for t in ts))

# Sparse allreduce as Horovod does it: allgather of indices and values.
dense = torch.zeros(5, 2)
dense[r + 1] = 1.0
got = hvd.sparse_allreduce_async(dense.to_sparse(), op=hvd.Sum)()
check("sparse allreduce", torch.equal(got.to_dense(), hvd.allreduce(dense, op=hvd.Sum)))

# join: rank 0 runs out of data first; its zeros take part in rank 1's allreduce.
if r == 0:
    last = hvd.join()
else:
    avg = hvd.allreduce(torch.tensor([4.0]))
    last = hvd.join()
check("allreduce beside a joined rank", r == 0 or avg.item() == 2.0)
check("join", last == 1)

# Optimizer state and options from the root, without numpy.
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.5, nesterov=bool(1 - r))
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
hvd.broadcast_optimizer_state(opt, root_rank=0)
group = opt.param_groups[0]
check("broadcast_optimizer_state options", group["lr"] == 0.1 and group["nesterov"] is True)
check("objects without numpy", hvd.broadcast_object({"r": r}, root_rank=1) == {"r": 1}
      and hvd.allgather_object(r * 10) == [0, 10])

# force_allreduce: a parameter without a gradient on one rank still gets the average.
torch.manual_seed(0)
net = torch.nn.ModuleDict({"a": torch.nn.Linear(1, 1), "b": torch.nn.Linear(1, 1)})
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.0),
                               named_parameters=net.named_parameters())
net["a" if r == 0 else "b"](torch.ones(1, 1)).sum().backward()
opt.step()
check("force_allreduce", net["b"].bias.grad.item() == 0.5 and net["a"].bias.grad.item() == 0.5)

# init -> shutdown -> init, as Horovod allows (a fresh key prefix in torchrun's store).
hvd.shutdown()
check("shut down", not hvd.is_initialized())
hvd.init()
check("init again", hvd.allreduce(torch.tensor([1.0 + r]), op=hvd.Sum).item() == 3.0)
