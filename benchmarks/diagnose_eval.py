"""How often does `ddpkit diagnose` name the right cause of a real log it was not written from?

The corpus is tests/fixtures/diagnose (each log with the URL of its thread and the cause the
thread confirmed). The split is frozen by folder and checked by repository (see
tests/diagnose_corpus.py SPLITS): the signatures were written from "train"; "heldout" and
"unseen" are measured; a held-out log from a repository that also appears in train (or is the
source of a signature) is counted separately, since its thread may have shaped a rule.

Prints, per split: top-1 and top-3 accuracy and how many answers were non-empty; for the
held-out logs: per-category precision and recall and the confusion matrix; and the findings on
healthy logs (the aim there is none).

    python benchmarks/diagnose_eval.py [-v]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from ddpkit.troubleshoot.diagnose import fallback  # noqa: E402
from ddpkit.troubleshoot.diagnose.kb import CATEGORIES, signatures  # noqa: E402
from ddpkit.troubleshoot.diagnose.matcher import analyse, diagnose_report  # noqa: E402
from ddpkit.troubleshoot.diagnose.scan import Scanner  # noqa: E402
from tests.diagnose_corpus import load_corpus, load_messages  # noqa: E402

SHORT = {"rendezvous_master_unreachable": "rdzv", "port_in_use_or_firewall": "port",
         "nccl_interface_selection": "iface", "nccl_timeout_or_desync": "tmout",
         "version_mismatch": "vers", "duplicate_gpu_or_wrong_device": "dupgpu",
         "shared_memory_docker": "shm", "ssh_failure": "ssh", "oom_cuda_error": "oom",
         "ddp_usage_error": "ddp", "launcher_misuse": "launch", "horovod_specific": "hvd",
         "p2p_acs_iommu": "p2p", "script_error": "script", "unknown": "unk", "none": "none"}


def train_repos(cases) -> set[str]:
    repos = {c.repo for c in cases if c.split == "train"}
    for sig in signatures():
        if "github.com/" in sig.source:
            repos.add("/".join(sig.source.split("github.com/")[1].split("/")[:2]).lower())
    return repos


def answer(case, hung: bool | None = None):
    """`hung`: as the user would run it (--hung where the thread says the run hung)."""
    report = diagnose_report(case.text.splitlines(), hung=case.hung if hung is None else hung)
    cats = [f.category for f in report.findings]
    return report, cats


def score(rows):
    n = len(rows)
    top1 = sum(1 for want, cats, _ in rows if cats and cats[0] == want)
    top3 = sum(1 for want, cats, _ in rows if want in cats[:3])
    # a category, "unknown" with its lines, or (no error in the log) its last lines
    nonempty = sum(1 for _, cats, report in rows if cats or report.decisive)
    return n, top1, top3, nonempty


def pct(a, n):
    return f"{a}/{n} ({100 * a / n:.0f}%)" if n else "-"


def matrix(rows) -> None:
    cats = sorted({w for w, _, _ in rows} | {c[0] if c else "none" for _, c, _ in rows},
                  key=lambda c: SHORT.get(c, c))
    grid = defaultdict(Counter)
    for want, got, _ in rows:
        grid[want][got[0] if got else "none"] += 1
    print("confusion (rows: true category, columns: top answer)")
    print(" " * 8 + "".join(f"{SHORT.get(c, c)[:6]:>7}" for c in cats))
    for want in cats:
        if not grid[want]:
            continue
        print(f"{SHORT.get(want, want)[:7]:>7} " + "".join(
            f"{grid[want][c] or '.':>7}" for c in cats))


def calibration(rows) -> None:
    """Whether the top answer's confidence means what it says: per band of confidence, how
    often the top category was right (held-out logs with a category answer)."""
    bands = [(0.0, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.01)]
    print("calibration (top answer's confidence: how often it was right)")
    for lo, hi in bands:
        got = [(want, report.findings[0]) for want, cats, report in rows
               if cats and cats[0] != "unknown" and lo <= report.findings[0].confidence < hi]
        right = sum(1 for want, f in got if f.category == want)
        mean = sum(f.confidence for _w, f in got) / len(got) if got else 0
        print(f"  {lo:.1f}-{min(hi, 1.0):.1f}  n={len(got):3}  mean confidence {mean:.2f}  "
              f"right {pct(right, len(got)):>12}")


def per_category(rows) -> None:
    print("per category: precision (of top answers) / recall (of true logs)")
    true = Counter(w for w, _, _ in rows)
    said = Counter(c[0] for _, c, _ in rows if c)
    right = Counter(w for w, c, _ in rows if c and c[0] == w)
    for cat in sorted(set(true) | set(said), key=lambda c: -true[c]):
        print(f"  {cat:32} n={true[cat]:3}  precision {pct(right[cat], said[cat]):>12}  "
              f"recall {pct(right[cat], true[cat]):>12}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-v", "--verbose", action="store_true", help="list every miss")
    args = parser.parse_args()
    cases = load_corpus()
    trained = train_repos(cases)
    groups = defaultdict(list)
    misses = []
    healthy_findings = []
    hangs: dict[str, list] = {"with": [], "without": []}  # held-out logs of runs that hung
    bare_rows = []  # every held-out log as answered without --hung
    for case in cases:
        report, cats = answer(case)
        if case.split == "healthy":
            if report.findings:
                healthy_findings.append((case.path.name, cats))
            continue
        if case.hung and case.split != "train":
            hangs["with"].append((case.category, cats, report))
            bare, bare_cats = answer(case, hung=False)
            hangs["without"].append((case.category, bare_cats, bare))
            bare_rows.append(hangs["without"][-1])
        elif case.split != "train":
            bare_rows.append((case.category, cats, report))
        split = case.split
        if split != "train" and case.repo in trained:
            split += " (repository also in train)"
        groups[split].append((case.category, cats, report))
        if not cats or cats[0] != case.category:
            misses.append((split, case.path.name, case.category, cats[:3]))
    print(f"{len(cases)} logs; {len(trained)} repositories in train (corpus + signature sources)")
    for split in sorted(groups):
        n, top1, top3, nonempty = score(groups[split])
        print(f"{split:38} n={n:3}  top-1 {pct(top1, n):>12}  top-3 {pct(top3, n):>12}  "
              f"non-empty {pct(nonempty, n):>12}")
    held = [r for s, rows in groups.items() if not s.startswith("train") for r in rows]
    n, top1, top3, nonempty = score(held)
    print(f"{'all held-out':38} n={n:3}  top-1 {pct(top1, n):>12}  top-3 {pct(top3, n):>12}  "
          f"non-empty {pct(nonempty, n):>12}")
    for how, label in (("with", "hung runs, read with --hung"), ("without", "the same, without")):
        n, top1, top3, nonempty = score(hangs[how])
        print(f"  {label:36} n={n:3}  top-1 {pct(top1, n):>12}  top-3 {pct(top3, n):>12}  "
              f"non-empty {pct(nonempty, n):>12}")
    n, top1, top3, _unused = score(bare_rows)
    print(f"{'all held-out, nobody passing --hung':38} n={n:3}  top-1 {pct(top1, n):>12}  "
          f"top-3 {pct(top3, n):>12}")
    healthy = sum(1 for c in cases if c.split == "healthy")
    caused = [(name, cats) for name, cats in healthy_findings if cats != ["unknown"]]
    print(f"healthy logs: {healthy}, with a finding: {len(healthy_findings)} "
          f"(a cause: {len(caused)}, only `unknown` with its lines: "
          f"{len(healthy_findings) - len(caused)}) {healthy_findings[:5] if healthy_findings else ''}")
    per_category(held)
    calibration(held)
    matrix(held)
    fallback_figures(cases)
    missed_lines = catalogue_figures()
    if args.verbose:
        for split, name, want, got in misses:
            print(f"miss [{split}] {name}: want {want}, got {got}")
        for msg, got in missed_lines:
            print(f"miss [catalogue {msg.project}] want {msg.category}, got {got}: {msg.line[:160]}")


def catalogue_figures():
    """Each message of the catalogue (tests/fixtures/diagnose/messages) as a log of one line:
    is its category the top answer (top-3)? Per project and per category. Lines that healthy
    runs print too (kind "fact") are left out: alone they must not be a finding."""
    messages = [m for m in load_messages() if m.kind != "fact"]
    if not messages:
        return []
    rows, missed = [], []
    for msg in messages:
        cats = [f.category for f in diagnose_report(msg.line.splitlines()).findings]
        rows.append((msg, cats))
        if not msg.right(cats[0] if cats else None):
            missed.append((msg, cats[:3]))
    print(f"message catalogue: {len(rows)} messages from the projects' sources, each alone")
    for key, label in ((lambda m: m.project, "project"), (lambda m: m.category, "category"),
                       (None, "")):
        parts = defaultdict(list)
        for msg, cats in rows:
            parts[key(msg) if key else "all"].append((msg, cats))
        for name in sorted(parts, key=lambda k: -len(parts[k])):
            got = parts[name]
            n = len(got)
            t1 = sum(1 for msg, cats in got if cats and msg.right(cats[0]))
            t3 = sum(1 for msg, cats in got if any(msg.right(c) for c in cats[:3]))
            print(f"  {(label + ' ' + name).strip():38} n={n:3}  top-1 {pct(t1, n):>12}  "
                  f"top-3 {pct(t3, n):>12}")
    return missed


# The held-out splits the fallback was measured on when it was built (a later frozen split is
# left out of this line until it has been measured once, as a whole).
HELD_OUT = ("heldout", "unseen", "unseen2", "unseen3")
HELD = "held-out (" + ", ".join(HELD_OUT) + ")"


def _rules_and_guess(case, model):
    """(rule categories, the fallback's ranked guesses where it would fire, forced guesses)."""
    scan = Scanner(signatures())
    scan.feed_all(case.text.splitlines())
    report = analyse(scan)
    cats = [f.category for f in report.findings]
    forced = [g["category"] for g in fallback.guesses(scan, model, top=3)]
    fires = bool(cats) and cats[0] == "unknown"
    return cats, (forced if fires else []), forced


def fallback_figures(cases) -> None:
    """The statistical fallback (fallback.py): where no rule fired, top-1/top-3 with it and
    without it, by leave-one-repository-out over train and on the held-out splits; and on the
    healthy logs. Also its accuracy alone (as if no rule existed), for scale."""
    train = [c for c in cases if c.split == "train" and c.category in CATEGORIES]
    docs = [(c.repo, c.category, frozenset(fallback.log_features(c.text.splitlines())))
            for c in train]
    shipped = fallback.load()
    rows = []  # (part, true category, rule categories, guesses where it fires, forced guesses)
    for repo in sorted({c.repo for c in train}):
        model = fallback.fit([(c, f) for r, c, f in docs if r != repo])
        model.update(temperature=shipped["temperature"], calibration=shipped["calibration"])
        for case in (c for c in train if c.repo == repo):
            rows.append(("train, leave-one-repository-out", case.category,
                         *_rules_and_guess(case, model)))
    for case in cases:
        if case.split in HELD_OUT:
            rows.append((HELD, case.category, *_rules_and_guess(case, shipped)))
    state = "on" if fallback.ENABLED else "off"
    for part in ("train, leave-one-repository-out", HELD):
        mine = [r for r in rows if r[0] == part]
        silent = [r for r in mine if not r[2] or r[2][0] == "unknown"]
        n = len(silent)
        w1 = sum(1 for _p, want, _c, g, _f in silent if g[:1] == [want])
        w3 = sum(1 for _p, want, _c, g, _f in silent if want in g[:3])
        a1 = sum(1 for _p, want, _c, _g, f in mine if f[:1] == [want])
        a3 = sum(1 for _p, want, _c, _g, f in mine if want in f[:3])
        print(f"fallback ({state}), {part}: no rule fired on {n}: top-1 {pct(w1, n) if n else '-'}"
              f" with, 0 without; top-3 {pct(w3, n) if n else '-'} with, 0 without; alone "
              f"(as if no rule existed): top-1 {pct(a1, len(mine))}, top-3 {pct(a3, len(mine))}")
    healthy = [c for c in cases if c.split == "healthy"]
    fired = forced = 0
    for case in healthy:
        _cats, guess, force = _rules_and_guess(case, shipped)
        fired += bool(guess)
        forced += bool(force)
    print(f"fallback ({state}), healthy logs: fires on {fired}/{len(healthy)}; run on every "
          f"line regardless of the rules, it would guess on {forced}/{len(healthy)}")


if __name__ == "__main__":
    main()
