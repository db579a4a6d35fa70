"""Read a failed run's log, find the signatures it shows, rank them: the earliest root cause
first, consequences (a watchdog timeout on every rank, torchrun's ChildFailedError) after it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from ddpkit.troubleshoot.diagnose.kb import Signature, signatures

# Colour codes, also as pasted into issue threads without their ESC byte ("[0m ").
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|^(?:\[[0-9;]{1,5}m)+ ?")
# Per-rank prefixes a log line may carry, outermost first; each may appear nested in another.
# Named groups say where the line came from.
PREFIXES = (
    re.compile(r"^(?P<host>[\w.\-]+):(?P<rank>\d+|-) +\| "),  # ddpkit launch
    re.compile(r"^\[rank(?P<rank>\d+)\]: ?"),  # torchrun's tee / torch's own tracebacks
    re.compile(r"^\[default(?P<local>\d+)\]: ?"),  # torchrun's default tee prefix
    re.compile(r"^\[(?P<job>\d+),(?P<rank>\d+)\]<(?:stdout|stderr)>: ?"),  # mpirun/horovodrun
    re.compile(r"^(?P<rank>\d+): "),  # srun -l
)
CONFIDENCE = {"cause": 1.0, "symptom": 0.5}


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in the file
    text: str  # normalised: no colours, no rank prefixes
    raw: str
    where: str  # "node1:3", "rank 3", "" when unknown


@dataclass(frozen=True)
class Finding:
    id: str
    category: str
    confidence: float
    title: str
    evidence: dict
    fix: str
    source: str
    explanation: str
    kind: str
    first_line: int

    def to_dict(self) -> dict:
        return {"id": self.id, "category": self.category, "confidence": round(self.confidence, 3),
                "title": self.title, "evidence": self.evidence, "fix": self.fix,
                "source": self.source, "explanation": self.explanation, "kind": self.kind}


def normalise(raw: str, number: int) -> Line:
    text = ANSI.sub("", raw.rstrip("\r\n"))
    where: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for rx in PREFIXES:
            m = rx.match(text)
            if m:
                for key, value in m.groupdict().items():
                    if value not in (None, "-"):
                        where.setdefault(key, value)
                text = text[m.end():]
                changed = True
                break
    label = ""
    if "host" in where and "rank" in where:
        label = f"{where['host']}:{where['rank']}"
    elif "rank" in where:
        label = f"rank {where['rank']}"
    elif "local" in where:
        label = f"local rank {where['local']}"
    elif "host" in where:
        label = where["host"]
    return Line(number, text, raw.rstrip("\r\n"), label)


def _evidence(sig: Signature, first: Line, lines: list[Line]) -> dict:
    found: dict = {"line": first.number, "text": first.text.strip()[:300]}
    if first.where:
        found["where"] = first.where
    for rx in sig.patterns + sig.evidence:
        for ln in lines:
            m = rx.search(ln.text)
            if m:
                for key, value in m.groupdict().items():
                    if value is not None and key not in found:
                        found[key] = value.strip()
                break
    places = sorted({ln.where for ln in lines if ln.where and any(rx.search(ln.text) for rx in sig.patterns)})
    if len(places) > 1:
        found["seen_on"] = places[:16]
    return found


def diagnose(raw_lines: Iterable[str], sigs: tuple[Signature, ...] | None = None) -> list[Finding]:
    lines = [normalise(raw, i) for i, raw in enumerate(raw_lines, 1)]
    lines = [ln for ln in lines if ln.text.strip()]
    hits = []
    for sig in sigs or signatures():
        first = next((ln for ln in lines if any(rx.search(ln.text) for rx in sig.patterns)), None)
        if first is None:
            continue
        if not all(any(rx.search(ln.text) for ln in lines) for rx in sig.requires):
            continue
        if any(rx.search(ln.text) for rx in sig.excludes for ln in lines):
            continue
        hits.append((sig, first))
    # Causes before consequences; then the more specific signature; then the one seen first.
    hits.sort(key=lambda h: (h[0].kind != "cause", -h[0].weight, h[1].number))
    out, seen_categories = [], set()
    for sig, first in hits:
        confidence = sig.weight * CONFIDENCE[sig.kind]
        if sig.category in seen_categories:
            confidence *= 0.9  # another signature of a category already found adds little
        seen_categories.add(sig.category)
        out.append(Finding(id=sig.id, category=sig.category, confidence=min(confidence, 0.99),
                           title=sig.title, evidence=_evidence(sig, first, lines), fix=sig.fix,
                           source=sig.source, explanation=sig.explanation, kind=sig.kind,
                           first_line=first.number))
    return out


def diagnose_text(text: str) -> list[Finding]:
    return diagnose(text.splitlines())
