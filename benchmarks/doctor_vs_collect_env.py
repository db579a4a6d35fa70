"""Wall time of `ddpkit doctor --json` against `python -m torch.utils.collect_env`.

Both answer "what is this machine's distributed-training setup"; collect_env imports torch
and only prints facts, the doctor judges them. Aim: ratio <= 0.5.

    python benchmarks/doctor_vs_collect_env.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import sys

from _timing import alternate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    doctor = [sys.executable, "-m", "ddpkit", "doctor", "--json"]
    collect = [sys.executable, "-m", "torch.utils.collect_env"]
    t_doctor, t_collect = alternate(doctor, collect, args.rounds)
    print(f"ddpkit doctor --json        median {t_doctor:.3f} s")
    print(f"torch.utils.collect_env     median {t_collect:.3f} s")
    print(f"ratio doctor/collect_env    {t_doctor / t_collect:.3f}  (aim <= 0.5)")


if __name__ == "__main__":
    main()
