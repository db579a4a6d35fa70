"""Wall time of `ddpkit doctor` in Chinese against the same command in English.

The zh_CN catalog is read once per process; this measures what that costs a person who runs
the doctor in a Chinese locale. Aim: ratio <= 1.05.

    python benchmarks/i18n_startup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import sys

from _timing import alternate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    zh = [sys.executable, "-m", "ddpkit", "--lang", "zh", "doctor"]
    en = [sys.executable, "-m", "ddpkit", "--lang", "en", "doctor"]
    t_zh, t_en = alternate(zh, en, args.rounds)
    print(f"ddpkit doctor (zh_CN)  median {t_zh:.3f} s")
    print(f"ddpkit doctor (en)     median {t_en:.3f} s")
    print(f"ratio zh/en            {t_zh / t_en:.3f}  (aim <= 1.05)")


if __name__ == "__main__":
    main()
