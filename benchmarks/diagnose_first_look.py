"""First look at a new batch of logs, before any rule is changed for it: each log's expected
category beside diagnose's top three, then top-1 and top-3 for the folder. This is the figure
for logs the rules have never seen (README, "First looks").

    python benchmarks/diagnose_first_look.py tests/fixtures/diagnose/unseen33
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpkit.troubleshoot.diagnose.matcher import diagnose_report  # noqa: E402
from tests.diagnose_corpus import body, header  # noqa: E402


def main(folder: str) -> int:
    paths = sorted(Path(folder).glob("*.log"))
    if not paths:
        print(f"diagnose_first_look: no *.log in {folder}", file=sys.stderr)
        return 2
    top1 = top3 = 0
    for path in paths:
        text = path.read_text()
        want = header(text, "category") or "none"
        report = diagnose_report(body(text).splitlines(), hung=header(text, "hung") == "yes")
        got = [f.category for f in report.findings if f.category != "unknown"] or ["none"]
        top1 += got[0] == want
        top3 += want in got[:3]
        mark = "ok  " if got[0] == want else "miss"
        print(f"{mark} {path.name[:70]:70s} want {want:30s} got {', '.join(got[:3])}")
    print(f"{folder}: top-1 {top1}/{len(paths)}, top-3 {top3}/{len(paths)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]) if len(sys.argv) == 2 else 2)
