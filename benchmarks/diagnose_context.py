"""How `ddpkit diagnose` holds up when a cause line sits among the lines a real run prints.

The message catalogue's failure lines that the rules answer right alone are diagnosed again
(1) behind the prefixes launchers, collectors and loggers put before every line (four lines of
the same prefix around the cause), (2) followed by a launcher's tail (torchrun's summary,
mpirun's, DeepSpeed's, accelerate's, srun's), and (3) followed by what the other ranks print once
a rank failed (watchdog timeouts, NCCL's remote error, Gloo's and the store's lost connections,
the C10d store gone with its node). Prints, per way, how many right answers changed.
Run: python benchmarks/diagnose_context.py [--sample N] [--seed S]
"""

from __future__ import annotations

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from ddpkit.troubleshoot.diagnose.matcher import diagnose_report  # noqa: E402
from tests.diagnose_corpus import load_messages  # noqa: E402

PREFIXES = {
    "srun -l": "3: ", "torchrun --tee": "[rank3]: ", "torchrun default": "[default3]:",
    "mpirun --tag-output": "[1,3]<stderr>:", "ray": "(RayTrainWorker pid=2345, ip=10.0.0.3) ",
    "kubectl --timestamps": "2024-05-01T10:00:00.123456789Z ", "pdsh": "node02: ",
    "compose": "trainer-1  | ", "python logging": "2024-05-01 10:00:00,123 - root - ERROR - ",
    "deepspeed logger": "[2024-05-01 10:00:00,123] [ERROR] [launch.py:321:main] ",
    "glog": "E0501 10:00:00.123456 12345 train.py:12] ", "lightning": "[rank: 1] ",
    "loguru": "2024-05-01 10:00:00.123 | ERROR    | train:main:12 - ",
}
AROUND = ["Loading checkpoint shards: 100%", "epoch 0 step 10 loss 2.31", "wandb: Syncing run", "done"]
TORCHRUN_TAIL = """\
E1201 10:00:05.123000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) \
local_rank: 0 (pid: 2345) of binary: /usr/bin/python3
Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2024-12-01_10:00:05
  host      : node01
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 2345)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines()
TAILS = {
    "torchrun": TORCHRUN_TAIL,
    "mpirun": ["Primary job  terminated normally, but 1 process returned",
               "a non-zero exit code. Per user-direction, the job has been aborted.",
               "mpirun detected that one or more processes exited with non-zero status, thus causing",
               "the job to be terminated. The first process to do so was:", "",
               "  Process name: [[41970,1],3]", "  Exit code:    1"],
    "deepspeed": ["[2024-05-01 10:00:07,123] [INFO] [launch.py:319:sigkill_handler] Killing subprocess 2345",
                  "[2024-05-01 10:00:07,456] [ERROR] [launch.py:325:sigkill_handler] ['/usr/bin/python3', "
                  "'-u', 'train.py', '--local_rank=3'] exits with return code = 1"],
    "accelerate": ["Traceback (most recent call last):", '  File "/usr/local/bin/accelerate", line 8, in <module>',
                   "    sys.exit(main())", "subprocess.CalledProcessError: Command '['/usr/bin/python3', "
                   "'train.py']' returned non-zero exit status 1."],
    "srun": ["srun: error: node02: task 3: Exited with exit code 1",
             "srun: launch/slurm: _step_signal: Terminating StepId=1234.0"],
}
ECHOES = {
    "watchdog timeout": "[rank0]:[E1201 10:00:05.123000 140 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600049 milliseconds before timing out.",
    "NCCL remote error": "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
    "c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
    "heartbeat monitor": "[rank0]:[E1201 10:00:05.123000 140 ProcessGroupNCCL.cpp:1423] [PG 0 (default_pg) Rank 0] "
    "Heartbeat monitor timed out! Process will be terminated after dumping debug info.",
    "gloo peer closed": "[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
    "closed by peer [10.0.0.2]:62183",
    "store reset": "[rank1]: torch.distributed.DistBackendError: [1] is setting up NCCL communicator and retrieving "
    "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Connection "
    "reset by peer",
    "store gone": "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d "
    "store has failed. See inner exception for details.",
    "gloo recv timeout": "[rank0]: RuntimeError: Timed out waiting 1800000ms for recv operation to complete",
    "horovod shut down": "horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was "
    "caused by an exception on one of the ranks or an attempt to allreduce, allgather or broadcast a tensor "
    "after one of the ranks finished execution.",
}


def top(lines: list[str]) -> list[str]:
    return [f.category for f in diagnose_report(lines).findings if f.category != "unknown"][:1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sample", type=int, default=400, help="cause lines to try (0: all)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    lines = [m for m in load_messages() if m.kind != "fact" and "\n" not in m.line]
    right = [m for m in lines if top([m.line]) and top([m.line])[0] in (m.category, m.also or m.category)]
    sample = right if not args.sample else random.Random(args.seed).sample(right, min(args.sample, len(right)))
    print(f"{len(right)} of {len(lines)} one-line catalogue failures answered right alone; trying {len(sample)}")
    ways = {f"prefix: {k}": (lambda m, p=p: [p + x for x in AROUND[:2] + [m.line] + AROUND[2:]])
            for k, p in PREFIXES.items()}
    ways.update({f"tail: {k}": (lambda m, t=t: [m.line, *t]) for k, t in TAILS.items()})
    ways.update({f"echo: {k}": (lambda m, e=e: [m.line, e]) for k, e in ECHOES.items()})
    for name, make in ways.items():
        lost = Counter()
        for m in sample:
            got = top(make(m))
            if not got or got[0] not in (m.category, m.also or m.category):
                lost[got[0] if got else "none"] += 1
        print(f"  {name:28s} right answers changed {sum(lost.values()):4d}/{len(sample)}"
              + (f"   (now: {', '.join(f'{c} {n}' for c, n in lost.most_common(3))})" if lost else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
