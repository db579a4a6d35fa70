"""An accelerate training script. `ddpkit launch --engine accelerate -H node0,node1 ...` runs
`accelerate launch` on every node with --num_machines/--machine_rank/--main_process_ip/
--main_process_port derived from the same plan as torchrun runs."""
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(cpu=not torch.cuda.is_available())
torch.manual_seed(0)
x = torch.randn(512, 10)
loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=16, shuffle=True)
model = torch.nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

for epoch in range(2):
    for xb, yb in loader:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
    accelerator.print(f"epoch {epoch} loss {loss.item():.4f}")

checksum = sum(p.detach().double().sum().item() for p in accelerator.unwrap_model(model).parameters())
print(f"RESULT rank={accelerator.process_index} world={accelerator.num_processes} "
      f"params={checksum:.10f}", flush=True)
accelerator.end_training()
import torch.distributed as dist  # noqa: E402

if dist.is_initialized():
    dist.destroy_process_group()
del model, optimizer, loader, accelerator
import gc  # noqa: E402

gc.collect()
