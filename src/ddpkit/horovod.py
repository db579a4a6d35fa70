"""`import ddpkit.horovod as hvd`: the horovod.torch API over torch.distributed."""

from ddpkit.compat.horovod_torch import *  # noqa: F401,F403
from ddpkit.compat.horovod_torch import (  # noqa: F401
    Average,
    Compression,
    DistributedOptimizer,
    Sum,
)
