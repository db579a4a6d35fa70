"""Does ddpkit's training API cost speed? steps/s of the same 2-rank Gloo training loop:
  1. ddpkit.runtime (init, loader, wrap) against a hand-written DDP loop   (aim >= 0.98)
  2. ddpkit.horovod (`ddpkit launch --horovod`) against real Horovod
     (`ddpkit launch --engine horovod`, needs `ddpkit setup horovod`)
  3. ddpkit.horovod with its cross-rank agreement on every collective against without
     (DDPKIT_HVD_CHECK=0): steps/s, and microseconds per allreduce of 4 B and 4 MiB
  4. ddpkit.runtime under `launch --hang-timeout` (the watcher thread in every worker, steps
     counted by the loader, torch's flight recorder on) against without    (aim >= 0.99)
measured alternately, medians of --rounds runs each.

    python benchmarks/runtime_overhead.py [--rounds 5] [--watch-only]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEPS = str(HERE / "_steps.py")


def rate(argv: list[str], env: dict | None = None) -> float:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
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
    parser.add_argument("--watch-only", action="store_true", help="only part 4")
    args = parser.parse_args()
    launch = [sys.executable, "-m", "ddpkit", "launch"]
    watch_cost(launch, args.rounds)
    if args.watch_only:
        return
    ours, hand = compare([*launch, "--nproc-per-node", "2", STEPS, "runtime"],
                         [*launch, "--nproc-per-node", "2", STEPS, "ddp"], args.rounds)
    print(f"ddpkit.runtime {ours:.2f} steps/s, hand-written DDP {hand:.2f} steps/s, "
          f"ratio {ours / hand:.3f} (aim >= 0.98)")
    check_cost(launch, args.rounds)
    if importlib.util.find_spec("horovod") is None:
        print("real Horovod is not installed (ddpkit setup horovod): horovod comparison skipped")
        return
    shim, real = compare([*launch, "--horovod", "--nproc-per-node", "2", STEPS, "horovod"],
                         [*launch, "--engine", "horovod", "-np", "2", "-H", "localhost:2", STEPS,
                          "horovod"], args.rounds)
    print(f"ddpkit.horovod {shim:.2f} steps/s, real Horovod {real:.2f} steps/s, "
          f"ratio {shim / real:.3f}")


def watch_cost(launch: list[str], rounds: int) -> None:
    """What --hang-timeout costs a training loop that counts its steps: the watcher thread
    looks twice a second; the flight recorder notes every collective."""
    base = [*launch, "--nproc-per-node", "2"]
    watched, plain = compare([*base, "--hang-timeout", "600", STEPS, "runtime"],
                             [*base, STEPS, "runtime"], rounds)
    print(f"ddpkit.runtime with --hang-timeout {watched:.2f} steps/s, without {plain:.2f} "
          f"steps/s, ratio {watched / plain:.3f} (aim >= 0.99)")


def check_cost(launch: list[str], rounds: int) -> None:
    """What ddpkit.horovod's agreement before every collective costs (DDPKIT_HVD_CHECK=0 turns
    it off): training steps/s, and microseconds per blocking allreduce (4 B and 4 MiB)."""
    on, off = dict(os.environ, DDPKIT_HVD_CHECK="1"), dict(os.environ, DDPKIT_HVD_CHECK="0")
    shim = [*launch, "--horovod", "--nproc-per-node", "2"]
    steps_on, steps_off = [], []
    lat = {"on": [], "off": []}
    for _ in range(rounds):
        steps_on.append(rate([*shim, STEPS, "horovod"], on))
        steps_off.append(rate([*shim, STEPS, "horovod"], off))
        for key, env in (("on", on), ("off", off)):
            done = subprocess.run([*shim, str(HERE / "_hvd_latency.py")], capture_output=True,
                                  text=True, timeout=300, env=env)
            m = re.search(r"HVD_US small=(\S+) large=(\S+)", done.stdout + done.stderr)
            if not m:
                raise SystemExit(f"no latency:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            lat[key].append((float(m.group(1)), float(m.group(2))))
    med = statistics.median
    print(f"ddpkit.horovod checks on {med(steps_on):.2f} steps/s, off {med(steps_off):.2f} "
          f"steps/s, ratio {med(steps_on) / med(steps_off):.3f}; allreduce 4 B "
          f"{med(x[0] for x in lat['on']):.0f} vs {med(x[0] for x in lat['off']):.0f} us, "
          f"4 MiB {med(x[1] for x in lat['on']):.0f} vs {med(x[1] for x in lat['off']):.0f} us")


if __name__ == "__main__":
    main()
