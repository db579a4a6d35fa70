"""Does ddpkit's training API cost speed? steps/s of the same 2-rank Gloo training loop:
  1. ddpkit.runtime (init, loader, wrap) against a hand-written DDP loop   (aim >= 0.98)
  2. ddpkit.horovod (`ddpkit launch --horovod`) against real Horovod
     (`ddpkit launch --engine horovod`, needs `ddpkit setup horovod`)
measured alternately, medians of --rounds runs each.

    python benchmarks/runtime_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = str(HERE / "_steps.py")


def rate(argv: list[str]) -> float:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    m = re.search(r"STEPS_PER_S (\S+)", done.stdout + done.stderr)
    if not m:
        raise SystemExit(f"no rate from {' '.join(argv)}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return float(m.group(1))


def compare(a: list[str], b: list[str], rounds: int) -> tuple[float, float]:
    ra, rb = [], []
    for _ in range(rounds):
        ra.append(rate(a))
        rb.append(rate(b))
    return statistics.median(ra), statistics.median(rb)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    launch = [sys.executable, "-m", "ddpkit", "launch"]
    ours, hand = compare([*launch, "--nproc-per-node", "2", STEPS, "runtime"],
                         [*launch, "--nproc-per-node", "2", STEPS, "ddp"], args.rounds)
    print(f"ddpkit.runtime {ours:.2f} steps/s, hand-written DDP {hand:.2f} steps/s, "
          f"ratio {ours / hand:.3f} (aim >= 0.98)")
    if importlib.util.find_spec("horovod") is None:
        print("real Horovod is not installed (ddpkit setup horovod): horovod comparison skipped")
        return
    shim, real = compare([*launch, "--horovod", "--nproc-per-node", "2", STEPS, "horovod"],
                         [*launch, "--engine", "horovod", "-np", "2", "-H", "localhost:2", STEPS,
                          "horovod"], args.rounds)
    print(f"ddpkit.horovod {shim:.2f} steps/s, real Horovod {real:.2f} steps/s, "
          f"ratio {shim / real:.3f}")


if __name__ == "__main__":
    main()
