"""The CentOS guide's Horovod script, completed. Runs unmodified under real Horovod
(`horovodrun -np 4 -H node0:2,node1:2 python examples/horovod_style.py`) and under ddpkit
without Horovod (`ddpkit launch --horovod -H node0:2,node1:2 examples/horovod_style.py`)."""
import horovod.torch as hvd
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

hvd.init()
if torch.cuda.is_available():
    torch.cuda.set_device(hvd.local_rank())
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

torch.manual_seed(1234 + hvd.rank())  # different on purpose: broadcast_parameters fixes it
model = torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size(), momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

g = torch.Generator().manual_seed(0)
x = torch.randn(512, 10, generator=g)
train_dataset = TensorDataset(x, x.sum(1, keepdim=True))
train_sampler = DistributedSampler(train_dataset, num_replicas=hvd.size(), rank=hvd.rank(),
                                   shuffle=False)
train_loader = DataLoader(train_dataset, batch_size=16, sampler=train_sampler)

for epoch in range(2):
    train_sampler.set_epoch(epoch)
    for xb, yb in train_loader:
        optimizer.zero_grad()
        loss = F.mse_loss(model(xb.to(device)), yb.to(device))
        loss.backward()
        optimizer.step()
    avg = hvd.allreduce(loss.detach(), name="loss")
    if hvd.rank() == 0:
        print(f"epoch {epoch} average loss {avg.item():.6f}", flush=True)

flat = torch.cat([p.detach().flatten().double() for p in model.parameters()])
print("RESULT rank=%d params=%s" % (hvd.rank(), ",".join("%.9g" % v for v in flat.tolist())),
      flush=True)
hvd.shutdown()
