"""Unified diffs for the findings with a mechanical fix. An edit is (first line, last line, new
text): it replaces lines first..last (1-based), or inserts before `first` when last < first.
An in-line edit is (line, first column, end column, new text), so two fixes of one line combine."""

from __future__ import annotations

import difflib
from typing import Iterable

from ddpkit.troubleshoot.lint import Finding


def apply(text: str, findings: Iterable[Finding]) -> str:
    lines = text.splitlines()
    all_edits = {e for f in findings for e in f.edits}
    for no, c0, c1, new in sorted((e for e in all_edits if len(e) == 4), reverse=True):
        raw = lines[no - 1].encode()  # ast columns count UTF-8 bytes
        lines[no - 1] = (raw[:c0] + new.encode() + raw[c1:]).decode("utf-8", "replace")
    edits = sorted((e for e in all_edits if len(e) == 3), key=lambda e: (e[0], e[1]),
                   reverse=True)
    taken: list[tuple[int, int]] = []
    for first, last, new in edits:
        span = (first, max(first, last))
        if any(not (span[1] < a or span[0] > b) for a, b in taken) and last >= first:
            continue  # two fixes touch the same line: keep the first, the next run shows the rest
        lines[first - 1:last] = new.split("\n")
        if last >= first:
            taken.append(span)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def unified(path: str, text: str, findings: Iterable[Finding]) -> str:
    new = apply(text, findings)
    if new == text:
        return ""
    return "".join(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                        fromfile=f"a/{path.lstrip('/')}",
                                        tofile=f"b/{path.lstrip('/')}"))
