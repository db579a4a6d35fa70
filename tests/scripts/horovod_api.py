"""Exercises ddpkit.horovod's horovod.torch API on real ranks; prints 'OK <what>' per check."""
import torch

import ddpkit.horovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
ok = print


def check(name, cond):
    assert cond, f"{name} failed on rank {r}"
    ok(f"OK {name} rank={r}", flush=True)


check("identity", hvd.is_initialized() and n >= 2 and 0 <= hvd.local_rank() < hvd.local_size()
      and hvd.cross_size() >= 1 and hvd.gloo_built())
t = torch.tensor([float(r + 1)])
check("allreduce average", hvd.allreduce(t).item() == (n + 1) / 2 and t.item() == r + 1)
check("allreduce sum", hvd.allreduce(t, op=hvd.Sum).item() == n * (n + 1) / 2)
check("allreduce min/max", hvd.allreduce(t, op=hvd.Min).item() == 1
      and hvd.allreduce(t, op=hvd.Max).item() == n)
u = torch.tensor([float(r)])
hvd.allreduce_(u, op=hvd.Sum)
check("allreduce_ in place", u.item() == n * (n - 1) / 2)
check("allreduce fp16", abs(hvd.allreduce(t, compression=hvd.Compression.fp16).item()
                            - (n + 1) / 2) < 1e-2)
g = hvd.allgather(torch.full((r + 1, 2), float(r)))
check("allgather uneven", g.shape == (n * (n + 1) // 2, 2) and g[0, 0] == 0 and g[-1, 0] == n - 1)
b = torch.tensor([float(r)])
check("broadcast", hvd.broadcast(b, root_rank=1).item() == 1 and b.item() == r)
hvd.broadcast_(b, root_rank=0)
check("broadcast_", b.item() == 0)
out = hvd.alltoall(torch.arange(n, dtype=torch.float32) + 10 * r)
check("alltoall", out.tolist() == [10.0 * k + r for k in range(n)])
splits = torch.tensor([1] * n)
out2, received = hvd.alltoall(torch.arange(n, dtype=torch.float32), splits=splits)
check("alltoall splits", received.tolist() == [1] * n and out2.tolist() == [float(r)] * n)
check("broadcast_object", hvd.broadcast_object({"from": r}, root_rank=0) == {"from": 0})
check("allgather_object", hvd.allgather_object(r) == list(range(n)))

torch.manual_seed(r)
model = torch.nn.Linear(3, 1)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
w = hvd.allgather(model.weight.detach())
check("broadcast_parameters", all(torch.equal(w[0], w[k]) for k in range(n)))
opt = torch.optim.Adam(model.parameters(), lr=0.1)
if r == 0:
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
hvd.broadcast_optimizer_state(opt, root_rank=0)
check("broadcast_optimizer_state", len(opt.state_dict()["state"]) == 2)

for op, expect in ((hvd.Average, lambda gs: sum(gs) / n), (hvd.Sum, sum)):
    m = torch.nn.Linear(1, 1, bias=False)
    torch.nn.init.zeros_(m.weight)
    dopt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0),
                                    named_parameters=m.named_parameters(), op=op)
    (m(torch.ones(1, 1)) * (r + 1)).sum().backward()
    dopt.step()
    grads = [float(k + 1) for k in range(n)]
    check(f"DistributedOptimizer {op}", abs(m.weight.item() + expect(grads)) < 1e-6)

m = torch.nn.Linear(1, 1, bias=False)
torch.nn.init.zeros_(m.weight)
dopt = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=1.0), backward_passes_per_step=2)
for _ in range(2):
    (m(torch.ones(1, 1)) * (r + 1)).sum().backward()
dopt.step()
check("backward_passes_per_step", abs(m.weight.item() + 2 * (n + 1) / 2) < 1e-6)
hvd.shutdown()
