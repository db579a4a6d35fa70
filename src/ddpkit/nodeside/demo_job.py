# ddpkit demo job: a DDP training whose true answer is known, plus the checks that prove the
# cluster works. Run by torchrun on every node (sent as a file; needs only torch).
# Each rank ends with one line "DDPKIT_DEMO_RESULT {json}" that `ddpkit demo` judges.
import datetime
import gc
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = int(os.environ.get("DDPKIT_DEMO_EPOCHS", "5"))
W_TRUE = [2.0, -3.0, 0.5, 1.0]
B_TRUE = 0.25


def main():
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    started = time.time()

    # The same data on every rank (fixed seed); DistributedSampler gives each rank its shard.
    g = torch.Generator().manual_seed(0)
    x_all = torch.randn(4096, len(W_TRUE), generator=g)
    y_all = x_all @ torch.tensor([W_TRUE]).T + B_TRUE
    data = TensorDataset(x_all, y_all)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=64, sampler=sampler, pin_memory=cuda)

    torch.manual_seed(1000 + rank)  # a different init on every rank: DDP must broadcast rank 0's
    model = DDP(torch.nn.Linear(len(W_TRUE), 1).to(device), device_ids=[local_rank] if cuda else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    first = last = None
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            last = loss.item()
            first = last if first is None else first
        if rank == 0:
            print("epoch %d/%d  loss %.6f" % (epoch + 1, EPOCHS, last), flush=True)

    # Every rank must hold exactly the same parameters.
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    identical = all(torch.equal(gathered[0], other) for other in gathered)
    # An all_reduce must return the right sum.
    total = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(total)
    expected = world * (world + 1) / 2
    weight_err = (model.module.weight.detach().cpu() - torch.tensor([W_TRUE])).abs().max().item()
    result = {
        "rank": rank, "world_size": world, "backend": dist.get_backend(),
        "device": str(device), "host": os.uname()[1], "loss_first": first, "loss_last": last,
        "params_identical": identical, "allreduce_sum": total.item(), "allreduce_expected": expected,
        "weight_error": weight_err, "seconds": round(time.time() - started, 3),
    }
    print("rank %d: loss %.4g -> %.3g, parameters identical on all ranks: %s, all_reduce sum "
          "%g (expected %g)" % (rank, first, last, identical, total.item(), expected), flush=True)
    print("DDPKIT_DEMO_RESULT " + json.dumps(result), flush=True)

    dist.destroy_process_group()
    # Drop what still refers to the process group before the interpreter shuts down: its Gloo
    # worker threads then finish while Python can still run them. Left to interpreter exit,
    # a thread that releases the last tensor needs the GIL during finalization, CPython ends
    # that thread, and std::terminate aborts the worker ("terminate called without an active
    # exception", SIGABRT) although training succeeded.
    del model, opt, loss, loader, data, gathered, flat, total
    gc.collect()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
