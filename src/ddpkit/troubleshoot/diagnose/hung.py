"""The likely causes of a hang, ranked by what the log says about the run's shape.

A hang prints no error, so a static log cannot tell a run that hung from a healthy excerpt.
What it can tell is the run's shape: one node whose GPUs copy peer to peer (where PCIe ACS and
the IOMMU hang the first collective), several nodes (where an interface or a firewall does),
and the platform's own warnings. Each cause of hangs (signatures-hang.toml) has a prior; the
hang facts and the circumstantial `fact` signatures of its category raise it, as independent
evidence (1 - prod(1 - w)). The answer ranks the causes with the lines behind each; it becomes
the diagnosis only when the run is known to have hung (--hung, a run record that ended "hung",
a collective that timed out, a log that ends retrying a connection), and is shown as "if the
run hung" otherwise. Where the launch took every rank's stack during the hang, those outweigh
the log: a straggler, a rendezvous that never completed, or every rank in its own code."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.troubleshoot.diagnose.evidence import Finding, line_dict
from ddpkit.troubleshoot.diagnose.kb import Signature, hang_causes, hang_settings, stack_causes
from ddpkit.troubleshoot.diagnose.scan import Scanner
from ddpkit.troubleshoot.stacks import WAITING

COMPLETED, RETRYING = "hang-run-completed", "hang-log-ends-retrying"
ALL_IN_FIRST = "hang-first-collective-never-completed"


def hang_findings(scan: Scanner, found: dict[str, tuple[Signature, list]], top: int = 3,
                  stacks: dict | None = None) -> list[Finding]:
    """Up to `top` causes of a hang, likeliest first (kind "hang"). `found`: the signatures
    that matched (evidence.all_matches); `stacks`: what the launch saw in every rank's stack
    (summary.json's "stacks", see clean_stacks); a cause they name comes first, with
    evidence["basis"] == "stacks"."""
    stacks = clean_stacks(stacks)
    seen = stack_finding(stacks)
    facts = {sid: m for sid, m in found.items()
             if m[0].kind in ("hang", "fact") and sid != COMPLETED}
    # every rank waits in the same collective and none is behind: not a desync, the collective
    # itself does not complete (the transport: P2P, an interface, a firewall)
    groups = stacks.get("groups", [])
    all_wait = len(groups) == 1 and groups[0]["kind"] in WAITING
    ranked = []
    for cause in hang_causes():
        miss, factor, support = 1 - cause.prior, 1.0, []
        for sig, hits in facts.values():
            if sig.category == cause.category:
                miss *= 1 - sig.weight
                support.append((sig, hits))
        for sid, w in cause.with_:
            if sid in facts:
                if w >= 0:
                    miss *= 1 - w
                    support.append(facts[sid])
                else:
                    factor *= 1 + w
        if all_wait and cause.category == "nccl_timeout_or_desync":
            factor *= hang_settings().get("all_waiting_desync_factor", 1.0)
        ranked.append(((1 - miss) * factor, cause, support))
    ranked.sort(key=lambda r: -r[0])
    out = [seen] if seen is not None else []
    for conf, cause, support in ranked:
        if len(out) >= top:
            break
        if seen is not None and cause.category == seen.category:
            continue
        support.sort(key=lambda s: -s[0].weight)
        lines = [dict(line_dict(hits[0].line), signature=sig.id) for sig, hits in support[:5]]
        first = dict(lines[0] if lines else _last_line(scan))
        first.pop("signature", None)
        evidence = dict(first, supporting=lines, facts=[_(sig.title) for sig, _h in support[:5]],
                        basis="facts" if support else "prior")  # prior: where the log stops
        out.append(Finding(
            id=f"hang-{cause.category}", category=cause.category, confidence=round(conf, 3),
            title=_(cause.title), evidence=evidence, fix=_(cause.fix), source=cause.source,
            explanation=_(cause.explanation), kind="hang", first_line=first.get("line", 0)))
    return out


def _last_line(scan: Scanner) -> dict:
    """Where the log stops (no fact ranked this cause): the last line kept of its last source."""
    for q in reversed(list(scan.tail_raw.values())):
        for number, raw, source, where in reversed(q):
            if raw.strip():
                out = {"line": number, "text": raw.strip()[:300]}
                if where:
                    out["where"] = where
                if source:
                    out["source"] = source
                return out
    return {"line": 0, "text": ""}


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _texts(value) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def clean_stacks(raw) -> dict:
    """The parts of a run record's "stacks" this module reads, each of the type it needs (a
    record is a file on disk: anything else is dropped, never a traceback)."""
    if not isinstance(raw, dict):
        return {}
    fr = raw.get("flight_recorder") if isinstance(raw.get("flight_recorder"), dict) else {}
    groups = []
    for g in raw.get("groups") if isinstance(raw.get("groups"), list) else []:
        place = g.get("place") if isinstance(g, dict) else None
        if isinstance(place, dict):
            groups.append({"kind": _text(place.get("kind")), "text": _text(place.get("text"))})
    return {"why": _text(raw.get("why")), "verdict": _text(raw.get("verdict")),
            "rendezvous": _text(raw.get("rendezvous")),
            "stragglers": _texts(raw.get("stragglers")) or _texts(fr.get("stragglers")),
            "groups": groups}


def stack_finding(stacks: dict) -> Finding | None:
    """The rendezvous that never completed, the straggler, or every rank in its own code, from
    the stacks the launch took when the run fell silent (clean_stacks' form); None when they
    name none of these."""
    groups = stacks.get("groups", [])
    if stacks.get("rendezvous"):
        when, detail = "rendezvous", stacks["rendezvous"]
    elif stacks.get("stragglers"):
        when, detail = "stragglers", stacks.get("verdict") or ", ".join(stacks["stragglers"])
    elif groups and all(g["kind"] not in WAITING + ("unknown", "") for g in groups):
        when, detail = "own-code", groups[0]["text"]
    else:
        return None
    cause = next((c for c in stack_causes() if c.when == when), None)
    if cause is None:
        return None
    evidence = {"line": 0, "text": detail[:300], "source": "summary.json", "basis": "stacks"}
    if stacks.get("stragglers"):
        evidence["stragglers"] = list(stacks["stragglers"])
    return Finding(id=cause.id, category=cause.category, confidence=cause.confidence,
                   title=_(cause.title).format(detail=detail), evidence=evidence,
                   fix=_(cause.fix), source=cause.source, explanation=_(cause.explanation),
                   kind="hang", first_line=0)


def completed(found: dict) -> bool:
    """The log shows the run's end: no "if the run hung" for it."""
    return COMPLETED in found


def stuck_connecting(found: dict) -> bool:
    """A source ends retrying a connection: the run hung there, whatever the user says."""
    return RETRYING in found


def all_in_first_collective(found: dict) -> bool:
    """Every rank timed out in the same first collective (scan.py's FIRST_MARK): the
    watchdog's timeout says where the run hung, the transport why."""
    return ALL_IN_FIRST in found
