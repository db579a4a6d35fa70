"""The same training with ddpkit.runtime: shorter, and it resumes after a restart.

    ddpkit launch -H node0,node1 --max-restarts 1 examples/ddp_runtime.py --ckpt /shared/ckpt.pt
"""
import argparse
import os

import torch

import ddpkit

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--ckpt", default="ddp_runtime_ckpt.pt")
args = parser.parse_args()

with ddpkit.init() as ctx:  # NCCL on GPUs, Gloo on CPU; destroys the group on exit
    ddpkit.seed_everything(0)
    x = torch.randn(1024, 10)
    data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
    loader = ddpkit.loader(data, batch_size=32)  # DistributedSampler + set_epoch for you
    model = ddpkit.wrap(torch.nn.Linear(10, 1).to(ctx.device))
    opt = torch.optim.SGD(model.parameters(), lr=ddpkit.scale_lr(0.01 / 2))
    start = ddpkit.load_checkpoint(args.ckpt, model, opt)  # 0, or the epoch to resume from
    for epoch in loader.epochs(start, args.epochs):
        for step, (xb, yb) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(xb.to(ctx.device)), yb.to(ctx.device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            if os.environ.get("CRASH_AT") == f"{epoch}:{step}:{ctx.rank}" and \
                    os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
                os._exit(17)  # a worker dies mid-epoch (tests); torchrun restarts the group
        ddpkit.save_checkpoint(args.ckpt, model, opt, epoch=epoch + 1)
        ddpkit.print0(f"epoch {epoch} loss {loss.item():.4f}")
    checksum = sum(p.detach().double().sum().item() for p in model.parameters())
    print(f"RESULT rank={ctx.rank} params={checksum:.10f}", flush=True)
