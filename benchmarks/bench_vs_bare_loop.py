"""Does `ddpkit bench` measure what a bare loop measures? busbw of ddpkit bench's all_reduce
against a bare timed loop of dist.all_reduce, on the same processes and sizes (1 MiB to 64 MiB,
Gloo, 2 ranks), alternating per size. Aim: ratio >= 0.97 (the harness costs nothing).

    python benchmarks/bench_vs_bare_loop.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


def worker(rounds: int) -> None:
    import statistics

    import torch
    import torch.distributed as dist

    from ddpkit.nodeside.bench_job import Bench, busbw_factor

    dist.init_process_group("gloo")
    n, rank = dist.get_world_size(), dist.get_rank()
    iters = 20
    cfg = {"iters": iters, "warmup": 1, "check": 0, "average": 3}
    bench = Bench(cfg, torch.device("cpu"))
    sizes = [2**k for k in range(20, 27)]  # 1 MiB .. 64 MiB
    ratios = {}
    for size in sizes:
        ours, bare = [], []
        for _ in range(rounds):
            ours.append(bench.row("all_reduce", "float", "sum", size)["oop"]["busbw"])
            buf = torch.ones(size // 4)
            dist.all_reduce(buf)  # warm-up
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(buf)
            sec = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(sec, op=dist.ReduceOp.MAX)  # the slowest rank, as bench reports
            bare.append(size / 1e9 / sec.item() * busbw_factor("all_reduce", n))
        ratios[size] = statistics.median(ours) / statistics.median(bare)
        if rank == 0:
            print(f"{size:>10d} B  ddpkit bench {statistics.median(ours):6.3f} GB/s  "
                  f"bare loop {statistics.median(bare):6.3f} GB/s  ratio {ratios[size]:.3f}",
                  flush=True)
    if rank == 0:
        geo = statistics.geometric_mean(ratios.values())
        print(f"ratio ddpkit bench / bare loop (geometric mean over sizes): {geo:.3f} "
              "(aim >= 0.97)", flush=True)
    dist.destroy_process_group()
    del buf, bench
    import gc
    gc.collect()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rounds)
        return
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           os.path.abspath(__file__), "--worker", "--rounds", str(args.rounds)]
    raise SystemExit(subprocess.call(cmd))


if __name__ == "__main__":
    main()
