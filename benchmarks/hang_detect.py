"""From the start of a hang to the named straggler, and what --hang-timeout costs.

1. On the 3-node virtual cluster (needs root): rank 1 sleeps inside its loop while the others
   wait in all_reduce. `ddpkit launch --hang-timeout T` names it; we time from the last line
   any rank printed to the line that names the straggler (aim: T + at most 15 s). Plain
   torchrun waits for Gloo's 30-minute timeout (1800 s; NCCL: 600 s) and then prints a
   timeout from every rank that names nobody; that baseline is the documented default, not
   waited out here.
2. On this machine, 2 ranks: steps/s of a healthy loop that prints a line per step, with and
   without --hang-timeout, alternately (aim: ratio >= 0.99).

    python benchmarks/hang_detect.py [--timeout 10] [--rounds 7 (0: skip part 2)] [--skip-cluster]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
HANG = str(ROOT / "tests" / "scripts" / "hang.py")
GLOO_TIMEOUT_S = 1800


def detect(timeout: float, env: dict) -> None:
    from tests.vcluster import VCluster, missing_requirements

    why = missing_requirements()
    if why:
        print(f"hang detection part skipped: {why}")
        return
    with VCluster(3) as vc:
        argv = [sys.executable, "-m", "ddpkit", "launch", "--ssh-config", str(vc.ssh_config),
                "-H", vc.hosts_spec(1), "--hang-timeout", str(timeout), "--env",
                "HANG_MODE=sleep", HANG]
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        last = named = 0.0
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.monotonic()
            if re.match(r"^node\d:\d+ +\| (READY|STEP)", line):
                last = now
            if "straggler:" in line and not named:
                named = now
                print(line.strip())
        proc.wait()
    if not named:
        raise SystemExit("the straggler was not named")
    extra = named - last - timeout
    print(f"hang to named straggler: {named - last:.1f} s = hang-timeout {timeout:g} s + "
          f"{extra:.1f} s (aim <= 15 s); plain torchrun with Gloo: {GLOO_TIMEOUT_S} s and no "
          f"name; ratio {(named - last) / GLOO_TIMEOUT_S:.4f}")


def steps_per_s(argv: list[str], env: dict) -> float:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    rates = [float(x) for x in re.findall(r"steps_per_s=([\d.]+)", done.stdout + done.stderr)]
    if done.returncode != 0 or not rates:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    return min(rates)  # the job's pace is its slowest rank's


def overhead(rounds: int, env: dict) -> None:
    """Alternating pairs; the median of the per-pair ratios, and their spread (the noise)."""
    run_env = {**env, "HANG_STEPS": "1500", "HANG_PAUSE": "0", "HANG_SIZE": "65536"}
    base = [sys.executable, "-m", "ddpkit", "launch", "--nproc-per-node", "2"]
    plain, watched = base + [HANG], base + ["--hang-timeout", "60", HANG]
    steps_per_s(plain, run_env)  # warm-up
    a, b = [], []
    for _ in range(rounds):
        a.append(steps_per_s(plain, run_env))
        b.append(steps_per_s(watched, run_env))
    ratios = sorted(y / x for x, y in zip(a, b))
    print(f"healthy loop, 2 ranks, 256 KiB all_reduce and a line per step: "
          f"{statistics.median(b):.0f} steps/s with --hang-timeout, {statistics.median(a):.0f} "
          f"without; ratio {statistics.median(ratios):.3f} (median of {rounds} pairs, spread "
          f"{ratios[0]:.2f}-{ratios[-1]:.2f}; aim >= 0.99)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--skip-cluster", action="store_true")
    args = parser.parse_args()
    env = {**os.environ, "DDPKIT_RUNS_DIR": tempfile.mkdtemp(prefix="ddpkit-bench-runs-")}
    if not args.skip_cluster:
        detect(args.timeout, env)
    if args.rounds > 0:
        overhead(args.rounds, env)


if __name__ == "__main__":
    main()
