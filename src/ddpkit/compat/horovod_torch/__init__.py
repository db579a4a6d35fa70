"""The `horovod.torch` API that training scripts use, over torch.distributed.

`ddpkit launch --horovod train.py` runs an unmodified `import horovod.torch as hvd` script on
torchrun + NCCL/Gloo: this folder is shipped to the nodes as `horovod/torch/` (it needs torch
and the standard library only). In code, `import ddpkit.horovod as hvd` is the same API.

Semantics follow Horovod 0.28: allreduce defaults to Average; ranks agree on every collective
before it runs (a mismatch is an error on every rank, not a hang: _wire.py); process sets are
torch process groups; allreduce, allgather, broadcast, alltoall and reducescatter (and their
grouped forms) are differentiable; async operations start in issue order; hvd.join() lets ranks
with less data finish early; DistributedOptimizer fuses the gradients into one allreduce per
dtype. Not provided: Adasum, elastic mode, the timeline, MPI communicators.
"""

import torch as _torch

from ._api import (  # noqa: F401
    allgather,
    allgather_async,
    allreduce,
    allreduce_,
    allreduce_async,
    allreduce_async_,
    alltoall,
    alltoall_async,
    barrier,
    broadcast,
    broadcast_,
    broadcast_async,
    broadcast_async_,
    grouped_allgather,
    grouped_allgather_async,
    grouped_allreduce,
    grouped_allreduce_,
    grouped_allreduce_async,
    grouped_allreduce_async_,
    grouped_reducescatter,
    grouped_reducescatter_async,
    join,
    poll,
    reducescatter,
    reducescatter_async,
    sparse_allreduce_async,
    synchronize,
)
from ._core import (  # noqa: F401
    HorovodInternalError,
    ProcessSet,
    add_process_set,
    ccl_built,
    cross_rank,
    cross_size,
    cuda_built,
    ddl_built,
    get_process_set_ids_and_ranks,
    global_process_set,
    gloo_built,
    gloo_enabled,
    init,
    is_homogeneous,
    is_initialized,
    local_rank,
    local_size,
    mpi_built,
    mpi_enabled,
    mpi_threads_supported,
    nccl_built,
    rank,
    remove_process_set,
    rocm_built,
    shutdown,
    size,
)
from ._ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from ._optim import (  # noqa: F401
    Compression,
    DistributedOptimizer,
    allgather_object,
    broadcast_object,
    broadcast_optimizer_state,
    broadcast_parameters,
)
from ._wire import MismatchError  # noqa: F401

SyncBatchNorm = _torch.nn.SyncBatchNorm
