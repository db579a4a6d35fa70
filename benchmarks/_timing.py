"""Shared helpers: time whole commands alternately so machine noise hits both sides alike."""

from __future__ import annotations

import statistics
import subprocess
import time


def wall(argv: list[str], env: dict | None = None, timeout: float = 600) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                          timeout=timeout)
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): "
                         f"{done.stderr.decode(errors='replace')[-2000:]}")
    return took


def alternate(a: list[str], b: list[str], rounds: int, env: dict | None = None):
    """Median wall time of a and of b, run a, b, a, b, ... after one warm-up of each."""
    wall(a, env)
    wall(b, env)
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(wall(a, env))
        tb.append(wall(b, env))
    return statistics.median(ta), statistics.median(tb)
