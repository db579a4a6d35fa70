"""Turn what the scan found into up to three ranked hypotheses, each with its supporting lines.

Confidence comes from the evidence: every signature that matched contributes its weight (how
sure that kind of evidence alone makes its category), combined per category as independent
evidence (1 - prod(1 - w)); a cause seen on several ranks adds a little. Consequences lose to
causes: when a rank raised an exception of its own, or a cause signature matched, categories
backed only by symptoms (a watchdog timeout on every rank) or by circumstantial facts rank after
it with their confidence cut. A Python error in the user's code that no signature explains is
`script_error`; a failed log with no hypothesis at all is `unknown`, with the decisive lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from ddpkit.i18n import N_, _
from ddpkit.troubleshoot.diagnose.evidence import Finding, all_matches, line_dict, values_of
from ddpkit.troubleshoot.diagnose.kb import Signature, signatures
from ddpkit.troubleshoot.diagnose.lines import Line, normalise
from ddpkit.troubleshoot.diagnose.pyerrors import CRASH, PLAIN_TYPES, PyException, failing
from ddpkit.troubleshoot.diagnose.scan import Hit, Scanner

__all__ = ["Finding", "Report", "diagnose", "diagnose_text", "normalise", "analyse"]
TIMEOUT_CATEGORIES = {"nccl_timeout_or_desync", "rendezvous_master_unreachable"}
NEXT_CHECKS = (  # English in JSON; shown translated (N_ marks them for the catalog)
    N_("ddpkit launch --log-dir runs/last ... then `ddpkit diagnose runs/last`: one log per "
       "rank, the first rank and host to fail named"),
    N_("ddpkit check -H <host1>,<host2>: versions, links, interfaces and firewalls between the "
       "nodes"),
    N_("ddpkit stacks (while it hangs): where each rank is stuck"),
    N_("rerun with NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL and diagnose that log"),
)
# A process that died of a signal (a native crash) left no Python traceback: how to get one.
CRASH_CHECK = N_("a process died of a signal (a native crash, no Python traceback): rerun with "
                 "PYTHONFAULTHANDLER=1 to print every thread's Python stack at the crash, and "
                 "compare the torch, CUDA and NCCL builds of every node with `ddpkit check -H "
                 "<host1>,<host2>`")
# A log with no error at all may be a run that hung or was killed without a word: what to do
# next instead of an empty answer (the category stays "none", so a healthy log has no finding).
SILENT_CHECKS = (
    N_("ddpkit stacks (while it hangs): where each rank is stuck, and whom the others wait for"),
    N_("ddpkit launch --hang-timeout 300 ...: names the straggler of a silent run and tears it down"),
    N_("ddpkit check -H <host1>,<host2>: versions, links, interfaces and firewalls between the "
       "nodes"),
    N_("rerun with NCCL_DEBUG=INFO TORCH_DISTRIBUTED_DEBUG=DETAIL and diagnose that log"),
)


@dataclass
class Report:
    findings: list[Finding]
    decisive: list[dict] = field(default_factory=list)
    next_checks: tuple[str, ...] = ()
    failed: bool = False  # the log shows an error at all
    first_failure: dict = field(default_factory=dict)
    hung: bool = False  # known to have hung: the causes of a hang are findings
    if_hung: list[Finding] = field(default_factory=list)  # a log with no error: if it hung

    @property
    def category(self) -> str:
        return self.findings[0].category if self.findings else "none"

    def to_dict(self) -> dict:
        out: dict = {"schema": 1, "findings": [f.to_dict() for f in self.findings]}
        # Never an empty answer: with no error in the log, its last lines and the checks for a
        # silent failure (category "none", no finding).
        out.update(category=self.category, first_failure=self.first_failure,
                   decisive_lines=self.decisive, next_checks=list(self.next_checks),
                   hung=self.hung)
        if self.if_hung:
            out["if_hung"] = [f.to_dict() for f in self.if_hung]
        return out


def _evidence(sig: Signature, hits: list[Hit], scan: Scanner) -> dict:
    first = min(hits, key=lambda h: (h.line.time is None, h.line.time or 0, h.line.number)).line
    found: dict = {"line": first.number, "text": first.display().strip()[:300]}
    if first.where:
        found["where"] = first.where
    if first.source:
        found["source"] = first.source
    for h in hits + [scan.hit(rx) for rx in sig.evidence if scan.hit(rx)]:
        for key, value in h.groups.items():
            found.setdefault(key, value.strip())
    if sig.differ:
        found[f"{sig.differ}_values"] = values_of(sig.differ, hits)
    places = sorted(set().union(*(h.places for h in hits)))
    if len(places) > 1:
        found["seen_on"] = places[:16]
    return found


@dataclass
class Hypothesis:
    category: str
    items: list = field(default_factory=list)  # (signature, hits), strongest first

    def confidence(self) -> float:
        miss = 1.0
        for sig, hits in self.items:
            places = len(set().union(*(h.places for h in hits)))
            w = min(0.97, sig.weight + (0.05 if sig.kind == "cause" and places > 1 else 0.0))
            miss *= 1 - w
        return 1 - miss

    def kinds(self) -> set[str]:
        return {sig.kind for sig, _unused in self.items}


def _script_error(scan: Scanner, cause_lines: set) -> tuple[PyException, float] | None:
    """The first exception a rank raised in its own code, when no signature explains it (on
    any line its message is printed on: "AssertionError:" then torch's "The NVIDIA driver on
    your system is too old")."""
    plain = [e for e in scan.tracebacks.exceptions if e.is_plain()
             and not any((e.line.source, n) in cause_lines for n in e.lines)]
    if not plain:
        return None
    root = scan.root_cause.get("rank")
    plain.sort(key=lambda e: (e.line.time is None, e.line.time or 0,
                              not (root and e.line.where.endswith(root)), not e.frames,
                              e.line.source, e.line.number))
    exc = plain[0]
    if exc.user_frame() and exc.frames and exc.frames[-1] == exc.user_frame():
        conf = 0.9 if exc.short_type in PLAIN_TYPES else 0.75
    elif exc.frames:
        conf = 0.6  # raised inside a library the script called
    else:
        conf = 0.65 if exc.short_type in PLAIN_TYPES else 0.45
    return exc, conf


def _script_finding(exc: PyException, conf: float, echoes: bool, same: int) -> Finding:
    at = _(" at {place}").format(place=exc.at()) if exc.at() else ""
    who = _("every rank ({n})").format(n=same) if same > 1 else exc.who()
    title = _("{who} raised {exception}{at}").format(who=who, exception=exc.describe(), at=at)
    if echoes and same <= 1:
        title += _("; the other ranks then timed out or failed waiting for it")
    shell = exc.short_type == "SyntaxError" and any(f[0].endswith(".sh") for f in exc.frames)
    fix = (_('Fix the error in the script at the line named (run it once without the launcher, e.g. `python train.py` with one process, to iterate faster); the distributed errors on the other ranks are consequences and go away with it.'))
    if shell:
        fix = (_('A shell script was run as Python: launch the Python entry point, or run the wrapper as a program: `ddpkit launch --no-python ... wrapper.sh`.'))
    if exc.missing_target:
        fix = (_('The script path does not exist where the rank started: give the launcher a path that exists on every node, relative to the working directory there (or absolute), e.g. `ddpkit launch -H ... path/to/train.py` run from the project directory.'))
    elif exc.short_type in ("ModuleNotFoundError", "ImportError"):
        fix = (_('Install the missing module in the Python environment the ranks run with (on every node: `ddpkit launch --python /path/to/venv/bin/python` picks it), or remove the import.'))
    evidence = {"line": exc.line.number, "text": exc.line.display().strip()[:300],
                "exception": exc.short_type, "message": exc.message.strip()[:200]}
    if exc.line.where:
        evidence["where"] = exc.line.where
    if exc.line.source:
        evidence["source"] = exc.line.source
    if exc.at():
        evidence["at"] = exc.at()
    return Finding(id="python-exception-in-script", category="script_error", confidence=conf,
                   title=title, evidence=evidence, fix=fix, source="https://docs.python.org/3/"
                   "tutorial/errors.html", explanation=_('The script itself raised an exception that is not a distributed failure; the ranks that kept running then waited for the one that died.'), kind="cause", first_line=exc.line.number)


def _hypotheses(found: dict[str, tuple[Signature, list[Hit]]]) -> list[Hypothesis]:
    by_cat: dict[str, Hypothesis] = {}
    for sig, hits in found.values():
        if sig.kind not in ("echo", "hang"):  # hang facts weigh only in a hang (hung.py)
            by_cat.setdefault(sig.category, Hypothesis(sig.category)).items.append((sig, hits))
    for hyp in by_cat.values():
        hyp.items.sort(key=lambda it: (it[0].kind != "cause", -it[0].weight, it[1][0].line.number))
    return list(by_cat.values())


def _echoes(hyps: list[Hypothesis]) -> set[str]:
    """Categories whose evidence is all `echo_after` signatures printed after another
    category's evidence: the other nodes' view of a rank that failed first. Their causes decide
    where they have causes, else their symptoms. What came first is another category's cause,
    or its symptom on an error line (a warning a working run prints kills no rank: a watchdog
    after a NumPy warning is no echo of it); of two echoes, the first is the failure."""
    firsts = {hyp.category: min((h.line for sig, hits in hyp.items if sig.kind in ("cause", "symptom")
                                 for h in hits if sig.kind == "cause" or failing(h.line.text)),
                                key=Line.order, default=None)
              for hyp in hyps}
    out = set()
    for hyp in hyps:
        mine = [(sig, hits) for sig, hits in hyp.items if sig.kind == "cause"] or \
            [(sig, hits) for sig, hits in hyp.items if sig.kind == "symptom"]
        if not mine or not all(sig.echo_after for sig, _unused in mine):
            continue
        lines = [h.line for _unused, hits in mine for h in hits]
        if any(line is not None and hyp.category != cat and all(line.before(m) for m in lines)
               for cat, line in firsts.items()):
            out.add(hyp.category)
    return out


def analyse(scan: Scanner, sigs: tuple[Signature, ...] | None = None, top: int = 3,
            hung: bool = False, stacks: dict | None = None) -> Report:
    """`hung`: the run is known to have hung (the user says so, or its run record does);
    `stacks`: where every rank was then (a run record's summary)."""
    from ddpkit.troubleshoot.diagnose.hung import (
        all_in_first_collective,
        completed,
        hang_findings,
        stuck_connecting,
    )

    sigs = sigs or signatures()
    scan.finish()
    found = all_matches(sigs, scan)
    hung = hung or stuck_connecting(found)
    hyps = _hypotheses(found)
    cause_lines = {(h.line.source, h.line.number) for hyp in hyps for sig, hits in hyp.items
                   if sig.kind == "cause" for h in hits}
    script = _script_error(scan, cause_lines)
    scored: list[tuple[bool, float, Finding]] = []
    any_cause = script is not None or any("cause" in h.kinds() for h in hyps)
    echoes_after = _echoes(hyps)
    for hyp in hyps:
        conf = hyp.confidence()
        is_cause = "cause" in hyp.kinds() and hyp.category not in echoes_after
        if (any_cause and not is_cause) or hyp.category in echoes_after:
            conf *= 0.4  # a consequence or a circumstance, with a cause (or the first error) in sight
        sig, hits = hyp.items[0]
        ev = _evidence(sig, hits, scan)
        ev["supporting"] = [dict(line_dict(h.line), signature=s.id)
                            for s, hs in hyp.items[:5] for h in hs[:1]]
        scored.append((is_cause, conf, Finding(
            id=sig.id, category=hyp.category, confidence=min(conf, 0.99), title=_(sig.title),
            evidence=ev, fix=_(sig.fix), source=sig.source, explanation=_(sig.explanation),
            kind=sig.kind, first_line=hits[0].line.number)))
    if script:
        exc, conf = script
        others = [e for e in scan.tracebacks.exceptions if e.rank() and e.rank() != exc.rank()]
        echoes = any(f.category in TIMEOUT_CATEGORIES for _unused, _unused, f in scored) or any(
            not e.is_plain() for e in others)
        same = len({e.line.where for e in scan.tracebacks.exceptions
                    if e.describe() == exc.describe() and e.rank()})
        earlier = [f for c, _unused, f in scored if c and f.first_line < exc.line.number]
        if earlier:
            conf *= 0.7  # a cause signature matched before the exception
        scored.append((True, conf, _script_finding(exc, conf, echoes, same)))
    scored.sort(key=lambda s: (not s[0], s[2].category in echoes_after, -s[1]))
    findings = [f for _unused, _unused, f in scored[:top]]
    scan.decisive.set_tails([normalise(raw, number, source, where) for q in scan.tail_raw.values()
                             for number, raw, source, where in q])
    # A traceback frame is a failure even when the excerpt lost the exception line. An error
    # word alone is not, in a log that shows the run's end (torchrun's finished worker group,
    # nccl-tests' average bandwidth): a metrics logger's "ERROR" beside a run that completed.
    failed = bool(findings) or bool(scan.tracebacks.exceptions) or scan.tracebacks.saw_frames \
        or (scan.decisive.errors > 0 and not completed(found))
    # A collective that timed out with no cause in sight is a hang that was cut short: the
    # causes of a hang follow the timeout (the timeout says that it hung, not why).
    timed_out = bool(findings) and not any(c for c, _unused, _unused in scored) and any(
        f.category == "nccl_timeout_or_desync" for f in findings) \
        and "nccl_timeout_or_desync" not in echoes_after
    hang = hang_findings(scan, found, top, stacks) if (hung or timed_out or not failed) else []
    if hung or timed_out:
        # what the launch saw in every rank's stack comes first; the log's own findings next
        stack = [f for f in hang if f.evidence.get("basis") == "stacks"]
        if timed_out and all_in_first_collective(found):
            # every rank timed out in the first collective: the timeouts say where, not why
            # (the two likeliest transports first, the timeout itself after them)
            stack += [f for f in hang if f not in stack
                      and f.category not in TIMEOUT_CATEGORIES][:2]
        present = {f.category for f in findings}
        findings = (stack + findings + [f for f in hang if f not in stack
                                        and f.category not in present])[:top]
    decisive = scan.decisive.lines()
    checks = NEXT_CHECKS if failed else SILENT_CHECKS
    if failed and any(CRASH.search(d["text"]) for d in decisive):
        checks = (CRASH_CHECK, *checks)
    report = Report(findings, decisive, checks, failed or hung,
                    first_failure(scan, findings), hung=hung,
                    if_hung=[] if (failed or hung or completed(found)) else hang)
    if report.failed and not findings:
        report.findings = statistical_findings(scan) + [unknown_finding(report)]
    return report


def statistical_findings(scan: Scanner, enabled: bool | None = None) -> list[Finding]:
    """The statistical fallback's ranked guesses (fallback.py) where no rule fired; [] when it
    is off or abstains. Each lists the lines holding the words that weighed most."""
    from ddpkit.troubleshoot.diagnose import fallback

    if not (fallback.ENABLED if enabled is None else enabled):
        return []
    out = []
    for guess in fallback.guesses(scan):
        words = [f for f, _line in guess["features"]]
        first = min((line for _f, line in guess["features"]), key=lambda ln: (ln.source,
                                                                              ln.number))
        evidence = dict(line_dict(first), statistical=True, probability=guess["probability"],
                        words=words)
        seen, supporting = set(), []
        for f, line in guess["features"]:
            if (line.source, line.number) not in seen:
                seen.add((line.source, line.number))
                supporting.append(dict(line_dict(line), word=f))
        evidence["supporting"] = supporting
        out.append(Finding(
            id="statistical-guess", category=guess["category"], confidence=guess["confidence"],
            title=_("statistical guess, not a diagnosis: the words of this log resemble the "
                    "{category} logs of the corpus (probability {p:.0%})").format(
                        category=guess["category"], p=guess["probability"]),
            evidence=evidence,
            fix=_("Read the lines listed (they hold the words behind this guess) and confirm it "
                  "with the next checks before acting on it."),
            source="", explanation=_("No rule matched. A linear model learnt from the corpus's "
                                     "train logs ranked the categories by the words and stack "
                                     "frames of this log's first, error and last lines."),
            kind="statistical", first_line=first.number))
    return out


def first_failure(scan: Scanner, findings: list[Finding]) -> dict:
    """The first rank and host to fail: the rank of the root cause when one was found, else the
    rank torchrun names as its root cause, else the earliest error (by time where every such
    line has one, else the first in the log), a rank's own line before a launcher's."""
    out: dict = {}
    if scan.root_cause.get("rank"):
        out["torchrun_root_cause"] = dict(scan.root_cause)
    top = findings[0] if findings else None
    if top and top.kind == "cause" and top.evidence.get("where"):
        out.update({k: top.evidence[k] for k in ("line", "text", "where", "source")
                    if k in top.evidence})
        return out
    firsts = list(scan.decisive.first_error.values())
    root = scan.root_cause.get("rank")
    timed = bool(firsts) and all(ln.time is not None for ln in firsts)
    firsts.sort(key=lambda ln: (not (root and ln.where.endswith(f":{root}")),
                                not ln.where[-1:].isdigit(),
                                ln.time if timed else 0, ln.source, ln.number))
    if firsts:
        out.update(line_dict(firsts[0]))
    return out


def unknown_finding(report: Report) -> Finding:
    lines = report.decisive
    first = next((d for d in lines if d["why"].startswith("first error")), lines[0] if lines
                 else {"line": 0, "text": ""})
    evidence = {"line": first["line"], "text": first["text"], "decisive_lines": lines}
    if first.get("where"):
        evidence["where"] = first["where"]
    return Finding(id="unknown", category="unknown", confidence=0.0,
                   title=_('no known cause in this log; read the decisive lines and run the checks'),
                   evidence=evidence, fix="; ".join(report.next_checks), source="",
                   explanation=_('No signature of the knowledge base and no Python exception of the script explains this failure.'), kind="unknown",
                   first_line=first["line"])


def diagnose_report(raw_lines: Iterable[str], sigs: tuple[Signature, ...] | None = None,
                    gate: bool = True, hung: bool = False, stacks: dict | None = None) -> Report:
    sigs = sigs or signatures()
    scan = Scanner(sigs, gate=gate)
    scan.feed_all(raw_lines)
    return analyse(scan, sigs, hung=hung, stacks=stacks)


def diagnose(raw_lines: Iterable[str], sigs: tuple[Signature, ...] | None = None) -> list[Finding]:
    """The ranked findings (empty for a log that shows no failure at all)."""
    return diagnose_report(raw_lines, sigs).findings


def diagnose_text(text: str) -> list[Finding]:
    return diagnose(text.splitlines())
