"""Per-kind precision and recall of `ddpkit lint` on its corpus (tests/fixtures/lint/corpus.toml),
the dev and held-out parts apart, plus the time to lint a 500-line script.

    python benchmarks/lint_eval.py [--verbose] [--mirrors DIR]

--mirrors DIR also scores tests/fixtures/lint/fixcommits.toml: whole real files at the parent of
their fix commit, read from local clones DIR/OWNER+NAME/repo (not stored in this repository).

A finding counts as right when its kind matches a labelled mistake within 2 lines. Unlabelled
info-level notes are listed, not counted as wrong (the goal on correct scripts is about non-info
findings); a second finding of a matched kind in the same file (the same mistake shown where the
fix goes: call site, epoch loop) is not counted either. Correct scripts are reported apart."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ddpkit.data import tomllib  # noqa: E402
from ddpkit.troubleshoot.lint import KINDS, lint_text  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "lint"


def expected_lines(text: str, expect: list) -> list[tuple[str, int]]:
    lines = text.splitlines()
    out = []
    for item in expect:
        kind, needle = item[0], item[1]
        if isinstance(needle, int):
            out.append((kind, needle))
            continue
        nth = item[2] if len(item) > 2 else 1
        hits = [i for i, line in enumerate(lines, 1) if needle in line]
        if len(hits) < nth:
            raise SystemExit(f"corpus: '{needle}' not found {nth} time(s)")
        out.append((kind, hits[nth - 1]))
    return out


def load_text(case: dict, mirrors: Path | None) -> str | None:
    if "file" in case:
        return (CORPUS / "corpus" / case["file"]).read_text(encoding="utf-8")
    git = (mirrors or Path("/nonexistent")) / case["repo"].replace("/", "+") / "repo"
    if not git.is_dir():
        return None
    import subprocess

    done = subprocess.run(["git", "-C", str(git), "show", f"{case['commit']}^:{case['path']}"],
                          capture_output=True, text=True)
    return done.stdout if done.returncode == 0 else None


def score(cases: list[dict], verbose: bool,
          mirrors: Path | None = None) -> tuple[Counter, Counter, Counter, list]:
    tp, fp, fn, notes = Counter(), Counter(), Counter(), Counter()
    correct = []
    for case in cases:
        text = load_text(case, mirrors)
        if text is None:
            continue
        name = case.get("file") or f"{case['repo']}/{case['path']}"
        want = expected_lines(text, case["expect"])
        got = [(f.kind, f.line, f.severity) for f in lint_text(name, text)]
        used = set()
        for kind, line in want:
            hit = next((i for i, g in enumerate(got) if i not in used and g[0] == kind
                        and abs(g[1] - line) <= 2), None)
            if hit is None:
                fn[kind] += 1
                if verbose:
                    print(f"  MISS {name}:{line} {kind}")
            else:
                used.add(hit)
                tp[kind] += 1
        matched = {got[i][0] for i in used}
        for i, g in enumerate(got):
            if i not in used and g[2] == "info":
                notes[g[0]] += 1  # an unlabelled note: not counted against precision
                continue
            if i not in used and g[0] in matched:
                continue  # the same mistake also shown where the fix goes (call site, loop)
            if i not in used:
                fp[g[0]] += 1
                if verbose:
                    print(f"  EXTRA {name}:{g[1]} {g[0]} ({g[2]})")
        if case.get("confirmed") == "correct":
            correct.append((name, sum(1 for g in got if g[2] != "info")))
    if notes and verbose:
        print(f"  unlabelled info notes (not counted): {dict(notes)}")
    return tp, fp, fn, correct


def table(title: str, tp: Counter, fp: Counter, fn: Counter) -> None:
    print(f"\n{title}")
    print(f"  {'kind':<26}{'tp':>4}{'fp':>4}{'fn':>4}{'precision':>11}{'recall':>8}")
    for kind in KINDS:
        t, p, n = tp[kind], fp[kind], fn[kind]
        if t + p + n == 0:
            continue
        prec = f"{t / (t + p):.2f}" if t + p else "-"
        rec = f"{t / (t + n):.2f}" if t + n else "-"
        print(f"  {kind:<26}{t:>4}{p:>4}{n:>4}{prec:>11}{rec:>8}")
    t, p, n = sum(tp.values()), sum(fp.values()), sum(fn.values())
    print(f"  {'all':<26}{t:>4}{p:>4}{n:>4}{t / max(1, t + p):>11.2f}{t / max(1, t + n):>8.2f}")


def speed() -> float:
    """Milliseconds to lint a 500-line script (the corpus' Python files joined, parse included)."""
    parts = [p.read_text(encoding="utf-8") for p in sorted((CORPUS / "corpus").glob("*.py"))]
    text = "\n".join(parts)
    lines = text.splitlines()
    while len(lines) < 500:
        lines += lines
    sample = "\n".join(lines[:500])
    while True:  # cut at a point where the text still parses
        try:
            compile(sample, "s", "exec")
            break
        except SyntaxError:
            sample = "\n".join(sample.splitlines()[:-1])
    sample += "\n" + "\n".join("x = 1" for _ in range(500 - len(sample.splitlines())))
    lint_text("bench.py", sample)  # warm the rule tables
    times = []
    for _ in range(21):  # the median: other work on a shared machine inflates single runs
        start = time.perf_counter()
        lint_text("bench.py", sample)
        times.append((time.perf_counter() - start) * 1000)
    return sorted(times)[len(times) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verbose", action="store_true", help="list every miss and extra finding")
    ap.add_argument("--mirrors", type=Path, metavar="DIR",
                    help="also score fixcommits.toml from the clones under DIR")
    args = ap.parse_args()
    cases = tomllib.loads((CORPUS / "corpus.toml").read_text(encoding="utf-8"))["case"]
    real = [c for c in cases if c["confirmed"] not in ("correct", "guide")]
    print(f"corpus: {len(cases)} files: {len(real)} real scripts with confirmed mistakes, "
          f"{sum(c['confirmed'] == 'guide' for c in cases)} from the guides, "
          f"{sum(c['confirmed'] == 'correct' for c in cases)} correct")
    for split in dict.fromkeys(c["split"] for c in cases):
        part = [c for c in cases if c["split"] == split]
        if args.verbose:
            print(f"[{split}]")
        tp, fp, fn, correct = score(part, args.verbose)
        table(f"{split} ({len(part)} files)", tp, fp, fn)
        if correct:
            worst = max(n for _, n in correct)
            noisy = [f"{f} ({n})" for f, n in correct if n]
            print(f"  correct scripts: {len(correct)}, non-info findings at most {worst} per "
                  f"script{': ' + ', '.join(noisy) if noisy else ''}")
    if args.mirrors:
        mined = tomllib.loads((CORPUS / "fixcommits.toml").read_text(encoding="utf-8"))["case"]
        for split in dict.fromkeys(c["split"] for c in mined):
            part = [c for c in mined if c["split"] == split]
            if args.verbose:
                print(f"[fix commits, {split}]")
            tp, fp, fn, _ = score(part, args.verbose, args.mirrors)
            n = sum(1 for c in part if load_text(c, args.mirrors) is not None)
            table(f"whole files at fix commits, {split} ({n} of {len(part)} files found)",
                  tp, fp, fn)
    print(f"\nspeed: {speed():.1f} ms per 500-line script (goal <= 100 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
