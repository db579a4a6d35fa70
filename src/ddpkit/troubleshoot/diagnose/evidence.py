"""What a diagnosis is made of: a finding (a ranked hypothesis with its evidence) and the test
of whether a signature matched what the scan saw; shared by matcher.py and hung.py."""

from __future__ import annotations

from dataclasses import dataclass

from ddpkit.troubleshoot.diagnose.kb import Signature
from ddpkit.troubleshoot.diagnose.lines import Line
from ddpkit.troubleshoot.diagnose.scan import REPEAT_VALUES, Hit, Scanner


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



def line_dict(line: Line) -> dict:
    out = {"line": line.number, "text": line.display().strip()[:300]}
    if line.where:
        out["where"] = line.where
    if line.source:
        out["source"] = line.source
    return out


def matched(sig: Signature, scan: Scanner) -> list[Hit] | None:
    hits = [h for h in (scan.hit(rx) for rx in sig.patterns) if h is not None]
    if not hits or not all(scan.hit(rx) for rx in sig.requires):
        return None
    if any(scan.hit(rx) for rx in sig.excludes):
        return None
    if sig.differ and len(values_of(sig.differ, hits)) < 2:
        return None
    if sig.repeat and not _repeated(sig.repeat, hits):
        return None
    return sorted(hits, key=lambda h: (h.line.source, h.line.number))


def _repeated(group: str, hits: list[Hit]) -> bool:
    """A value of `group` on two lines or more while, where the lines name their world
    (a `world` group), some of its ranks were never named: a worker restarted by the launcher
    names every rank again, two processes given one rank leave another rank unnamed."""
    seen = values_of(group, hits)
    if not 0 < len(seen) < REPEAT_VALUES or sum(h.count for h in hits) <= len(seen):
        return False
    worlds = [int(w) for w in values_of("world", hits) if w.isdigit()]
    return not worlds or len(seen) < max(worlds)


def values_of(group: str, hits: list[Hit]) -> list[str]:
    return sorted(set().union(*(h.values.get(group, ()) for h in hits)))


def all_matches(sigs: tuple[Signature, ...], scan: Scanner) -> dict[str, tuple[Signature, list[Hit]]]:
    """Every signature that matched, by id, with its hits: computed once per diagnosis."""
    out = {}
    for sig in sigs:
        hits = matched(sig, scan)
        if hits:
            out[sig.id] = (sig, hits)
    return out
