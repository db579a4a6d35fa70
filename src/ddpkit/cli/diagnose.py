"""ddpkit diagnose: read a failed run's log, name the cause and the fix."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ddpkit.errors import ExitCode, UsageError
from ddpkit.i18n import N_, _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", metavar="FILE|DIR|-", nargs="?",
                        help=_("the log of the failed run, a run directory (launch --log-dir: every rank's log), or '-' for standard input"))
    parser.add_argument("--last", action="store_true",
                        help=_("the latest launch's run record (see 'ddpkit runs')"))
    parser.add_argument("--hung", action="store_true",
                        help=_("the run hung (no error): rank the causes of a hang by what the log says about the run (one node or several, how its GPUs talk)"))
    parser.add_argument("--top", type=int, default=3, metavar="N",
                        help=_('how many findings to show (default 3)'))


def report_for(path: str, hung: bool = False):
    """The diagnosis of a log file, of standard input ('-') or of a run directory, streamed."""
    from ddpkit.troubleshoot.diagnose.rundir import diagnose_dir, diagnose_stream

    if path == "-":
        return diagnose_stream(sys.stdin.buffer, hung=hung)
    try:
        if os.path.isdir(path):
            return diagnose_dir(Path(path), hung=hung)
        with open(path, "rb") as f:
            return diagnose_stream(f, hung=hung)
    except OSError as exc:
        raise UsageError(_('cannot read {path}: {strerror}').format(path=path, strerror=exc.strerror),
                         _("give a log file, a run directory (launch --log-dir), or '-' for standard input")) from None


def run(args: argparse.Namespace) -> int:
    if args.last:  # the latest run record: the same as `ddpkit diagnose <its directory>`
        from ddpkit.launch.runs import find_run

        args.log = str(find_run(None).dir)
    if args.log is None:
        raise UsageError(_('no log given'), _("ddpkit diagnose FILE, '-' for stdin, or --last"))

    report = report_for(args.log, hung=args.hung)
    if args.json:
        from ddpkit.render import print_json

        print_json(report.to_dict())
    else:
        show(report, top=max(1, args.top))
    known = report.findings and report.findings[0].category != "unknown"
    return ExitCode.OK if known else ExitCode.FAILURE


def show(report, out=None, top: int = 3) -> None:
    out = out or sys.stdout
    findings = [f for f in report.findings if f.category != "unknown"][:top]
    if not report.failed:
        out.write(_('no failure in this log: no error line, no exception (category: none)\n'))
        if report.decisive:
            out.write(_('if the run hung or was killed without a message, these were its last lines:\n'))
            _decisive(report, out)
        if report.if_hung:
            out.write(_('if the run hung, its likely causes by what this log says about the run '
                        '(`--hung` makes them the diagnosis):\n'))
            for i, f in enumerate(report.if_hung, 1):
                out.write(_("  {i}. [{category}] {title} (confidence {confidence:.2f})").format(
                    i=i, category=f.category, title=f.title, confidence=f.confidence) + "\n")
                for fact in f.evidence.get("facts", [])[:3]:
                    out.write(_("       because: {fact}").format(fact=fact) + "\n")
                out.write(_("       fix: {fix}").format(fix=f.fix) + "\n")
        return
    if report.hung:
        out.write(_('the run hung: its likely causes by what this log says about the run\n'))
    if not findings:
        out.write(_('unknown: no known cause in this log; the decisive lines and the next checks follow (category: unknown)\n'))
    for i, f in enumerate(findings, 1):
        out.write(_("{i}. [{category}] {title} (confidence {confidence:.2f})").format(
            i=i, category=f.category, title=f.title, confidence=f.confidence) + "\n")
        ev = dict(f.evidence)
        if ev.get("basis") == "prior":  # a cause of hangs no line of the log points at
            out.write(_("   no line points here; the log stops at {place}: {text}").format(
                place=_place(ev), text=ev.pop("text")) + "\n")
        else:
            out.write(_("   evidence: {place}: {text}").format(place=_place(ev),
                                                            text=ev.pop("text")) + "\n")
        extra = ", ".join(f"{k}={v}" for k, v in ev.items()
                          if k not in ("seen_on", "supporting", "decisive_lines", "facts", "basis"))
        if extra:
            out.write(f"             {extra}\n")
        for sup in ev.get("supporting", [])[1:4]:
            out.write(_("             and {place}: {text}").format(
                place=_place(dict(sup)), text=sup["text"][:160]) + "\n")
        for fact in ev.get("facts", [])[:3]:
            out.write(_("   because: {fact}").format(fact=fact) + "\n")
        if "seen_on" in ev:
            out.write(_('             also on: {ev}\n').format(ev=', '.join(ev['seen_on'])))
        out.write(_('   why: {explanation}\n   fix: {fix}\n').format(explanation=f.explanation, fix=f.fix))
        if f.source:
            out.write(_("   source: {source}").format(source=f.source) + "\n")
    first = report.first_failure
    if first.get("text"):
        out.write(_('first failure: {place}: {first}\n').format(place=_place(dict(first)), first=first['text'][:200]))
    if not findings:
        out.write(_('decisive lines:\n'))
        _decisive(report, out)


def _decisive(report, out) -> None:
    for d in report.decisive:
        out.write(f"  {_place(dict(d))} [{_why(d['why'])}]: {d['text'][:200]}\n")
    out.write(_('next checks:\n'))
    for check in report.next_checks:
        out.write(f"  - {_(check)}\n")


_WHY = {"command": N_("command"), "first error": N_("first error"),
        "last lines": N_("last lines")}
_WHY_OF = (("first error of ", N_("first error of {where}")),
           ("last lines of ", N_("last lines of {where}")))


def _why(why: str) -> str:
    """The reason a decisive line is shown ('first error of node0:1'), in the user's language."""
    for prefix, message in _WHY_OF:
        if why.startswith(prefix):
            return _(message).format(where=why[len(prefix):])
    return _(_WHY.get(why, why))


def _place(ev: dict) -> str:
    """'line 12 (rank 1)' or 'rank1.log:12 (node0:1)'; pops the keys it used."""
    line, where, source = ev.pop("line", 0), ev.pop("where", ""), ev.pop("source", "")
    at = f"{source}:{line}" if source else _("line {line}").format(line=line)
    return f"{at} ({where})" if where else at
