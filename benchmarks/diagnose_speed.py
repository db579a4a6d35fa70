"""How long does `ddpkit diagnose` take on a big log? (aim: a 50 MB log in <= 2 s)

Builds a log of the given size from a realistic mix (NCCL_DEBUG=INFO chatter from 8 ranks,
torchrun's tee prefixes, training progress, Python warnings, a few long lines) with a failure at
the end (rank 3 raises KeyError, the other ranks' watchdog times out), then times the streamed
diagnosis in this process and prints the answer. Also times a pathological log: long lines full
of the words the knowledge base's regexes look for (each line is cut at 4000 characters).

    python benchmarks/diagnose_speed.py [--mb 50] [--cold]

The first timing includes loading the knowledge base and building the scanner's gate, whose
tables `ddpkit diagnose` keeps in the user's cache after its first run: the line says whether
they came from there (--cold: an empty cache, as on a first run).
"""

from __future__ import annotations

import argparse
import atexit
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

NOISE = [
    "[default{r}]:node{n}:{pid}:{pid} [{r}] NCCL INFO Channel 0{c}/0 : {r}[{r}] -> {s}[{s}] via "
    "P2P/IPC/read",
    "[default{r}]:node{n}:{pid}:{pid} [{r}] NCCL INFO Connected all rings, use ring PXN 0 GDR 1",
    "[rank{r}]:[W1130 12:0{c}:11.123456 ProcessGroupNCCL.cpp:4115] Warning: TORCH_NCCL_AVOID_"
    "RECORD_STREAMS is the default now, this environment variable is ignored (function operator())",
    "[rank{r}]:epoch 3 step {pid} loss 0.{c}123 lr 0.0003 throughput 812.3 samples/s",
    "[rank{r}]:/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py:558: UserWarning: "
    "This DataLoader will create 16 worker processes in total.",
    "[default{r}]:node{n}:{pid}:{pid} [{r}] NCCL INFO comm 0x5581d0 rank {r} nranks 8 cudaDev {r}"
    " busId 1a000 commId 0x3e3c - Init COMPLETE",
]
FAILURE = [
    "[rank3]:Traceback (most recent call last):",
    '[rank3]:  File "/work/train.py", line 57, in <module>',
    '[rank3]:    x = batch["image"]',
    "[rank3]:KeyError: 'image'",
] + [f"[rank{r}]:[E1130 12:40:00.1 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
     "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
     "Timeout(ms)=600000) ran for 600010 milliseconds before timing out." for r in (0, 1, 2)]


def build(mb: int) -> bytes:
    out, size, i = [], 0, 0
    while size < mb * 1_000_000:
        r = i % 8
        line = NOISE[i % len(NOISE)].format(r=r, n=r // 4, pid=1000 + i % 997, c=i % 8,
                                            s=(r + 1) % 8)
        if i % 5000 == 0:
            line += " " + "x" * 3000  # a long line now and then
        out.append(line)
        size += len(line) + 1
        i += 1
    return ("\n".join(out + FAILURE) + "\n").encode()


def timed(data: bytes):
    from ddpkit.troubleshoot.diagnose.rundir import diagnose_stream

    start, cpu = time.perf_counter(), time.process_time()
    report = diagnose_stream(io.BytesIO(data))
    timed.cpu = time.process_time() - cpu  # CPU time: what a busy shared machine cannot inflate
    return time.perf_counter() - start, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--cold", action="store_true", help="an empty cache: a first run")
    args = parser.parse_args()
    if args.cold:
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="ddpkit-cold-")
        atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)
    from ddpkit.troubleshoot.diagnose.kb import gate_cache_path

    warm = gate_cache_path().exists()
    data = build(args.mb)
    took, report = timed(data)
    top = report.findings[0] if report.findings else None
    lines = data.count(b"\n")
    print(f"{len(data) / 1e6:.1f} MB, {lines} lines: {took:.2f} s wall, {timed.cpu:.2f} s CPU "
          f"({len(data) / 1e6 / took:.0f} MB/s; aim: 50 MB in <= 2 s); top finding: "
          f"{top.category if top else 'none'} ({top.title if top else ''}); gate tables "
          f"{'from the cache' if warm else 'worked out (a first run)'}")
    # Long lines full of words that regexes of the knowledge base look for, never completed.
    evil_line = "NCCL WARN " + "Connection refused timed out error " * 1100 + "!"
    evil = ("\n".join([evil_line] * 1300) + "\n").encode()
    took, _ = timed(evil)
    print(f"pathological: {len(evil) / 1e6:.0f} MB of {len(evil_line)}-character lines full of "
          f"trigger words: {took:.2f} s wall, {timed.cpu:.2f} s CPU")


if __name__ == "__main__":
    main()
