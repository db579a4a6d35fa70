"""Only rank 0 prints (as most training scripts do): the port torchrun gave the workers.
No torch import: a run of it costs only torchrun's own start."""
import os

if os.environ["RANK"] == "0":
    print(f"PORT rank=0 world={os.environ['WORLD_SIZE']} master_port={os.environ['MASTER_PORT']}",
          flush=True)
