"""ddpkit diagnose: read a failed run's log, name the cause and the fix."""

from __future__ import annotations

import argparse
import sys

from ddpkit.errors import ExitCode, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", metavar="FILE|-", help="the log of the failed run ('-' reads stdin)")
    parser.add_argument("--top", type=int, default=3, metavar="N",
                        help="how many findings to show (default 3)")


def read_log(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.buffer.read().decode("utf-8", "replace").splitlines()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}",
                         "give the path of a log file, or '-' to read standard input") from None


def run(args: argparse.Namespace) -> int:
    from ddpkit.troubleshoot.diagnose import diagnose

    findings = diagnose(read_log(args.log))
    if args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, "findings": [f.to_dict() for f in findings]})
    else:
        show(findings[: max(1, args.top)])
    return ExitCode.OK if findings else ExitCode.FAILURE


def show(findings, out=None) -> None:
    out = out or sys.stdout
    if not findings:
        out.write("no known failure signature in this log (category: unknown)\n")
        return
    for i, f in enumerate(findings, 1):
        out.write(f"{i}. [{f.category}] {f.title} (confidence {f.confidence:.2f})\n")
        ev = dict(f.evidence)
        where = f" ({ev.pop('where')})" if "where" in ev else ""
        out.write(f"   evidence: line {ev.pop('line')}{where}: {ev.pop('text')}\n")
        extra = ", ".join(f"{k}={v}" for k, v in ev.items() if k != "seen_on")
        if extra:
            out.write(f"             {extra}\n")
        if "seen_on" in ev:
            out.write(f"             also on: {', '.join(ev['seen_on'])}\n")
        out.write(f"   why: {f.explanation}\n   fix: {f.fix}\n   source: {f.source}\n")
