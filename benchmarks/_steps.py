"""A training loop timed in steps/s, in one of three styles (run by a launcher, 2 ranks):
  ddp      hand-written DistributedDataParallel loop
  runtime  the same loop with ddpkit.runtime (init, loader, wrap)
  horovod  the same model with `import horovod.torch as hvd` (real Horovod or ddpkit's shim)
Rank 0 prints "STEPS_PER_S <value>"."""
import os
import sys
import time

import torch

STEPS, WARMUP, BATCH, WIDTH = 150, 10, 64, 512
style = sys.argv[1]


def model_and_data():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                              torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                              torch.nn.Linear(WIDTH, 1))
    x = torch.randn(BATCH * (STEPS + WARMUP), WIDTH)
    return net, torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))


def sgd_step(model, params):
    opt = torch.optim.SGD(params, lr=1e-3)

    def step(xb, yb):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        opt.step()
    return step, opt


def timed(batches, step):
    it = iter(batches)
    for _ in range(WARMUP):
        step(*next(it))
    t0 = time.perf_counter()
    for _ in range(STEPS):
        step(*next(it))
    return STEPS / (time.perf_counter() - t0)


if style == "ddp":
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    dist.init_process_group("gloo")
    net, data = model_and_data()
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    sampler.set_epoch(0)
    loader = DataLoader(data, batch_size=BATCH // dist.get_world_size(), sampler=sampler)
    model = DDP(net)
    step, _ = sgd_step(model, model.parameters())
    rate = timed(loader, step)
    rank = dist.get_rank()
    dist.destroy_process_group()
elif style == "runtime":
    import ddpkit

    ctx = ddpkit.init()
    net, data = model_and_data()
    loader = ddpkit.loader(data, batch_size=BATCH // ctx.world_size, num_workers=0)
    loader.set_epoch(0)
    model = ddpkit.wrap(net)
    step, _ = sgd_step(model, model.parameters())
    rate = timed(loader, step)
    rank = ctx.rank
    ddpkit.shutdown()
else:
    import horovod.torch as hvd

    hvd.init()
    net, data = model_and_data()
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=hvd.size(),
                                                              rank=hvd.rank(), seed=0)
    loader = torch.utils.data.DataLoader(data, batch_size=BATCH // hvd.size(), sampler=sampler)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=1e-3),
                                   named_parameters=net.named_parameters())
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)

    def step(xb, yb):
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()

    rate = timed(loader, step)
    rank = hvd.rank()
    hvd.shutdown()
if rank == 0:
    print(f"STEPS_PER_S {rate:.3f}", flush=True)
os._exit(0)  # the process group is gone; skip interpreter teardown (timing only)
