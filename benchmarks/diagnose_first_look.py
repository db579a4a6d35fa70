"""First look at a new batch of logs, before any rule is changed for it: each log's expected
category beside diagnose's top three, then top-1 and top-3 for the folder. This is the figure
for logs the rules have never seen (README, "First looks").

    python benchmarks/diagnose_first_look.py tests/fixtures/diagnose/unseen33
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.diagnose_eval import answer  # noqa: E402
from tests.diagnose_corpus import load_folder  # noqa: E402


def main(folder: str) -> int:
    cases = load_folder(Path(folder), "first-look")
    if not cases:
        print(f"diagnose_first_look: no *.log in {folder}", file=sys.stderr)
        return 2
    top1 = top3 = 0
    for case in cases:
        # a healthy log is right with no cause: `unknown` with its lines is no cause
        got = [c for c in answer(case)[1] if c != "unknown"] or ["none"]
        top1 += got[0] == case.category
        top3 += case.category in got[:3]
        mark = "ok  " if got[0] == case.category else "miss"
        print(f"{mark} {case.path.name[:70]:70s} want {case.category:30s} got {', '.join(got[:3])}")
    print(f"{folder}: top-1 {top1}/{len(cases)}, top-3 {top3}/{len(cases)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
