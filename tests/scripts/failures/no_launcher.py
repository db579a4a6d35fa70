"""A DDP script run with plain python: env:// finds no RANK/WORLD_SIZE."""
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
