"""The likely causes of a hang, ranked by what the log says about the run's shape.

A hang prints no error, so a static log cannot tell a run that hung from a healthy excerpt.
What it can tell is the run's shape: one node whose GPUs copy peer to peer (where PCIe ACS and
the IOMMU hang the first collective), several nodes (where an interface or a firewall does),
and the platform's own warnings. Each cause of hangs (signatures-hang.toml) has a prior; the
hang facts and the circumstantial `fact` signatures of its category raise it, as independent
evidence (1 - prod(1 - w)). The answer ranks the causes with the lines behind each; it becomes
the diagnosis only when the run is known to have hung (--hung, a run record that ended "hung",
or a collective that timed out), and is shown as "if the run hung" otherwise."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.troubleshoot.diagnose.kb import Signature, hang_causes
from ddpkit.troubleshoot.diagnose.scan import Scanner
from ddpkit.troubleshoot.stacks import WAITING


def hang_findings(scan: Scanner, sigs: tuple[Signature, ...], top: int = 3,
                  stacks: dict | None = None) -> list:
    """Up to `top` causes of a hang, likeliest first (matcher.Finding, kind "hang"). `stacks`:
    what `launch --hang-timeout` saw in every rank's stack (summary.json's "stacks"), which
    outweighs anything a log says."""
    from ddpkit.troubleshoot.diagnose.matcher import Finding, _line_dict, _matched

    seen = stack_finding(stacks or {})
    if seen is not None:
        return [seen] + [f for f in hang_findings(scan, sigs, top) if f.category != seen.category
                         ][:top - 1]
    groups = (stacks or {}).get("groups") or []
    # every rank waits in the same collective and none is behind: not a desync, the collective
    # itself does not complete (the transport: P2P, an interface, a firewall)
    all_wait = len(groups) == 1 and groups[0].get("place", {}).get("kind") in WAITING

    matched = {}
    for sig in sigs:
        if sig.kind in ("hang", "fact") and sig.id != COMPLETED:
            hits = _matched(sig, scan)
            if hits:
                matched[sig.id] = (sig, hits)
    ranked = []
    for cause in hang_causes():
        miss, factor, support = 1 - cause.prior, 1.0, []
        for sig, hits in matched.values():
            if sig.category == cause.category:
                miss *= 1 - sig.weight
                support.append((sig, hits))
        for sid, w in cause.with_:
            if sid in matched:
                if w >= 0:
                    miss *= 1 - w
                    support.append(matched[sid])
                else:
                    factor *= 1 + w
        if all_wait and cause.category == "nccl_timeout_or_desync":
            factor *= 0.3
        ranked.append(((1 - miss) * factor, cause, support))
    ranked.sort(key=lambda r: -r[0])
    out = []
    for conf, cause, support in ranked[:top]:
        support.sort(key=lambda s: -s[0].weight)
        lines = [dict(_line_dict(hits[0].line), signature=sig.id) for sig, hits in support[:5]]
        first = lines[0] if lines else _last_line(scan)
        evidence = dict(first, supporting=lines, facts=[_(sig.title) for sig, _h in support[:5]],
                        basis="facts" if support else "prior")  # prior: where the log stops
        evidence.pop("signature", None)
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


def stack_finding(stacks: dict):
    """The straggler or the rendezvous that never completed, from the stacks the launch took
    when the run fell silent; None when they name neither."""
    from ddpkit.troubleshoot.diagnose.matcher import Finding

    fr = stacks.get("flight_recorder") or {}
    stragglers = stacks.get("stragglers") or fr.get("stragglers") or []
    verdict = stacks.get("verdict") or ""
    evidence = {"line": 0, "text": verdict[:300], "source": "summary.json", "basis": "stacks"}
    if stacks.get("rendezvous"):
        evidence["text"] = stacks["rendezvous"][:300]
        what = ("hang-stacks-rendezvous", "rendezvous_master_unreachable",
                _("the stacks taken during the hang: the rendezvous never completed "
                  "({rendezvous})").format(rendezvous=stacks["rendezvous"]),
                _("Start the missing nodes with the same --rdzv-endpoint (or MASTER_ADDR/"
                  "MASTER_PORT) and check that they reach it: `ddpkit check -H host1,host2`."),
                "https://pytorch.org/docs/stable/elastic/rendezvous.html",
                _("The launch took every rank's stack when the run fell silent: some nodes "
                  "were still waiting for the others to join."))
    elif stragglers:
        evidence["stragglers"] = list(stragglers)
        what = ("hang-stacks-straggler", "nccl_timeout_or_desync",
                _("the stacks taken during the hang: {verdict}").format(
                    verdict=verdict or ", ".join(stragglers)),
                _("Look at the straggler's place in its stack (`ddpkit stacks --last`): make "
                  "every rank call the same collectives in the same order (the same number of "
                  "batches, no collective under a rank-dependent `if`), or fix what keeps it "
                  "busy; TORCH_DISTRIBUTED_DEBUG=DETAIL names mismatched collectives."),
                "https://pytorch.org/docs/stable/distributed.html"
                "#debugging-torch-distributed-applications",
                _("The launch took every rank's stack when the run fell silent: the others "
                  "wait in a collective that this rank never reached."))
    elif groups_outside(stacks):
        place = stacks["groups"][0].get("place", {}).get("text", "")
        evidence["text"] = place[:300]
        what = ("hang-stacks-own-code", "script_error",
                _("the stacks taken during the hang: every rank is in its own code ({place}), "
                  "outside any collective: the script is slow or stuck by itself, not waiting "
                  "for another rank").format(place=place),
                _("Look at that place in the script (`ddpkit stacks --last` shows every "
                  "rank's stack): a loop that never ends, a lock, a DataLoader worker that "
                  "died, input that never arrives. The ranks' communication is not involved."),
                "https://pytorch.org/docs/stable/distributed.html"
                "#debugging-torch-distributed-applications",
                _("The launch took every rank's stack when the run fell silent: no rank was "
                  "in a collective, so none was waiting for another."))
    else:
        return None
    sid, category, title, fix, source, explanation = what
    return Finding(id=sid, category=category, confidence=0.85, title=title, evidence=evidence,
                   fix=fix, source=source, explanation=explanation, kind="hang", first_line=0)


def groups_outside(stacks: dict) -> bool:
    """Every rank the stacks found is in its own code, none in a collective or start-up."""
    groups = stacks.get("groups") or []
    return bool(groups) and all(g.get("place", {}).get("kind") not in WAITING + ("unknown",)
                                for g in groups)


def completed(scan: Scanner, sigs: tuple[Signature, ...]) -> bool:
    """The log shows the run's end: no "if the run hung" for it."""
    return _seen(scan, sigs, COMPLETED)


def stuck_connecting(scan: Scanner, sigs: tuple[Signature, ...]) -> bool:
    """A source ends retrying a connection: the run hung there, whatever the user says."""
    return _seen(scan, sigs, RETRYING)


def _seen(scan: Scanner, sigs: tuple[Signature, ...], sid: str) -> bool:
    from ddpkit.troubleshoot.diagnose.matcher import _matched

    return any(_matched(sig, scan) for sig in sigs if sig.id == sid)


COMPLETED, RETRYING = "hang-run-completed", "hang-log-ends-retrying"
