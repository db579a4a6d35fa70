"""First look at a new batch of logs, before any rule is changed for it: each log's expected
category beside diagnose's top three, then top-1 and top-3 for the folder. This is the figure
for logs the rules have never seen (README, "First looks"). Given a catalogue file (a round of
tests/fixtures/diagnose/messages, in the format of GATHER-BRIEF.md), each line alone: its
causes and symptoms right when the top answer is its category (or its `also`), its facts right
when they give no cause; lines another catalogue file already holds are left out.

    python benchmarks/diagnose_first_look.py tests/fixtures/diagnose/unseen33
    python benchmarks/diagnose_first_look.py /tmp/gather/cat16a/cnstacks.toml
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.diagnose_eval import answer  # noqa: E402
from ddpkit.troubleshoot.diagnose.matcher import diagnose_report  # noqa: E402
from tests.diagnose_corpus import MESSAGES, load_folder  # noqa: E402


def catalogue(path: Path) -> int:
    import tomllib

    known = {m["line"].strip() for other in MESSAGES.glob("*.toml") if other.resolve() != path.resolve()
             for m in tomllib.loads(other.read_text(encoding="utf-8"))["message"]}
    right = scored = quiet = facts = 0
    for m in tomllib.loads(path.read_text(encoding="utf-8"))["message"]:
        line = m["line"].strip()
        if line in known:
            continue
        got = [f.category for f in diagnose_report(line.splitlines()).findings if f.category != "unknown"]
        if m.get("kind") == "fact":
            facts += 1
            quiet += not got
            ok = not got
        else:
            scored += 1
            ok = bool(got) and got[0] in (m["category"], m.get("also") or m["category"])
            right += ok
        if not ok:
            print(f"miss want {m['category']:30s} got {', '.join(got[:3]) or 'none':40s} {line[:110]}")
    print(f"{path}: {right}/{scored} scored lines right, {quiet}/{facts} facts quiet")
    return 0


def main(folder: str) -> int:
    if folder.endswith(".toml"):
        return catalogue(Path(folder))
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
