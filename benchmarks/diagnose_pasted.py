"""How `ddpkit diagnose` holds up when a log reaches it the way logs reach issue threads.

Every corpus failure the rules answer right is mangled one way at a time (a web page's
HTML entities or non-breaking spaces, a quoted reply, a markdown code block, a log collector's
prefix, a terminal that cut lines at 100 columns, ...) and diagnosed again; prints, per way,
how many right answers changed, and whether any healthy log, mangled the same way, got a cause.
Run: python benchmarks/diagnose_pasted.py [way ...]
"""

from __future__ import annotations

import html
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "src")]

from ddpkit.troubleshoot.diagnose.matcher import diagnose_report  # noqa: E402
from tests.diagnose_corpus import load_corpus  # noqa: E402


def _each(fmt):
    return lambda t: "\n".join(fmt(i, ln) for i, ln in enumerate(t.splitlines()))


def _wrapped(width: int):
    """Long lines word-wrapped at `width`, as a forum or an e-mail does."""
    return lambda t: "\n".join(row for ln in t.splitlines() for row in (
        textwrap.wrap(ln, width, break_on_hyphens=False) or [""]))


WAYS = {
    "html-entities": lambda t: html.escape(t, quote=True).replace("&#x27;", "&#39;"),
    "non-breaking-spaces": lambda t: t.replace(" ", "\u00a0", 50),
    "quoted-reply": _each(lambda i, ln: "> " + ln),
    "code-fence": lambda t: "```\n" + t + "\n```",
    "code-block-indent": _each(lambda i, ln: "    " + ln),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "colours": _each(lambda i, ln: "\x1b[31m" + ln + "\x1b[0m" if "rror" in ln else ln),
    "tabs": lambda t: t.replace("    ", "\t"),
    "ray-prefix": _each(lambda i, ln: "(RayTrainWorker pid=1234, ip=10.0.0.1) " + ln),
    "compose-prefix": _each(lambda i, ln: "trainer_1  | " + ln),
    "pdsh-prefix": _each(lambda i, ln: "worker-1: " + ln),
    "kubectl-prefix": _each(lambda i, ln: "[pod/trainer-worker-0/pytorch] " + ln),
    "skypilot-prefix": _each(lambda i, ln: "(worker1, rank=1, pid=2233, ip=10.0.0.3) " + ln),
    "kubectl-timestamps": _each(lambda i, ln: f"2024-05-01T10:00:{i % 60:02d}.123456789Z {ln}"),
    "terminal-cut-100": lambda t: "\n".join(ln[i:i + 100] for ln in t.splitlines()
                                            for i in range(0, max(len(ln), 1), 100)),
    # partly handled (see the README): a logging stamp on every line, prose word-wrapping
    "logging-stamp": _each(lambda i, ln: f"[2024-05-01 10:00:{i % 60:02d},123] {ln}"),
    **{f"word-wrap-{w}": _wrapped(w) for w in (80, 100, 132)},
}


def top(text: str, hung: bool) -> list[str]:
    return [f.category for f in diagnose_report(text.splitlines(), hung=hung).findings][:1]


def main(argv: list[str]) -> int:
    ways = argv or list(WAYS)
    unknown = [w for w in ways if w not in WAYS]
    if unknown:
        print(f"unknown way {unknown[0]!r}; ways: {', '.join(WAYS)}", file=sys.stderr)
        return 2
    cases = load_corpus()
    failures = [c for c in cases if c.category != "none"]
    healthy = [c for c in cases if c.category == "none"]
    right = [c for c in failures if top(c.text, c.hung) == [c.category]]
    print(f"{len(right)} of {len(failures)} corpus failures answered right as gathered; "
          f"{len(healthy)} healthy logs")
    for way in ways:
        mangle = WAYS[way]
        changed = [c.path.name for c in right if top(mangle(c.text), c.hung) != [c.category]]
        caused = [c.path.name for c in healthy
                  if any(f.category != "unknown" for f in diagnose_report(
                      mangle(c.text).splitlines()).findings)]
        print(f"  {way:22s} right answers changed {len(changed):4d}/{len(right)}   "
              f"healthy logs given a cause {len(caused)}/{len(healthy)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
