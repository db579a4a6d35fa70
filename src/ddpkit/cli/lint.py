"""ddpkit lint: find the mistakes of distributed training scripts before a run (never runs them)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ddpkit.errors import ExitCode, UsageError
from ddpkit.i18n import N_, _

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE",
                        help=_("Python training scripts and shell launch scripts"))
    parser.add_argument("--diff", action="store_true",
                        help=_("print a unified diff of the mechanical fixes (changes nothing)"))
    parser.add_argument("--strict", action="store_true",
                        help=_("exit 1 on warnings too (by default only errors fail)"))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError as exc:
        raise UsageError(_("cannot read {path}: {why}").format(path=path, why=exc.strerror),
                         _("give the path of a Python script or a shell file")) from None


def lint_paths(paths: list[str], broken: list | None = None) -> list[tuple[str, str, list]]:
    """(path, text, findings) per file. A Python file that does not parse gets the line checks
    only; its syntax error is appended to `broken` and told on stderr."""
    from ddpkit.troubleshoot.lint import lint_lines, lint_text

    out = []
    for path in paths:
        text = _read(path)
        try:
            out.append((path, text, lint_text(path, text)))
        except SyntaxError as exc:
            sys.stderr.write(_("{path}:{line}: not valid Python ({why}): only the line checks "
                               "ran").format(path=path, line=exc.lineno, why=exc.msg) + "\n")
            sys.stderr.write("hint: " + _("python -m py_compile {path} shows the error").format(
                path=path) + "\n")
            if broken is not None:
                broken.append({"path": path, "line": exc.lineno, "message": exc.msg})
            out.append((path, text, lint_lines(path, text)))
    return out


def failed(findings, strict: bool) -> bool:
    """Errors fail; warnings fail only with --strict; info notes never do."""
    bad = ("error", "warn") if strict else ("error",)
    return any(f.severity in bad for f in findings)


def run(args: argparse.Namespace) -> int:
    broken: list = []
    results = lint_paths(args.files, broken)
    findings = [f for _p, _t, fs in results for f in fs]
    if args.diff:
        from ddpkit.troubleshoot.lint.fixes import unified

        for path, text, fs in results:
            sys.stdout.write(unified(path, text, fs))
    elif args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, "files": [p for p, _t, _f in results],
                    "findings": [f.to_dict() for f in findings], "syntax_errors": broken})
    else:
        show(findings, len(results))
    return ExitCode.FAILURE if broken or failed(findings, args.strict) else ExitCode.OK


# severities are ids in JSON and words on a line, as a compiler shows them
SEVERITY_WORDS = (N_("error"), N_("warn"), N_("info"), N_("note"))


def show(findings, nfiles: int, out=None) -> None:
    out = out or sys.stdout
    for f in findings:
        if f.same_as:  # the same mistake, shown where the fix may go: one line is enough
            out.write(f"{f.path}:{f.line}: {_('note')}: [{f.kind}] {f.message} "
                      + _("(see line {line})").format(line=f.same_as) + "\n")
            continue
        out.write(f"{f.path}:{f.line}: {_(f.severity)}: [{f.kind}] {f.message}\n")
        out.write("    " + _("why: {text}").format(text=f.why) + "\n")
        out.write("    " + _("fix: {text}").format(text=f.fix) + "\n")
    counts = {s: sum(1 for f in findings if f.severity == s and not f.same_as)
              for s in ("error", "warn", "info")}
    out.write(_("{files} file(s): {errors} error(s), {warns} warning(s), {notes} note(s)").format(
        files=nfiles, errors=counts["error"], warns=counts["warn"], notes=counts["info"]) + "\n")


def before_launch(script: str, *, module: bool, strict: bool, no_lint: bool,
                  workdir: str | None = None) -> bool:
    """Lint the script `ddpkit launch` is about to start; findings go to stderr.

    Returns True when the launch must stop (--strict and an error or a warning). Never raises:
    a lint problem must not stop a launch, so any failure (no such file here, a syntax error,
    a bug) becomes a debug note and the launch goes on."""
    if no_lint or module:
        return False
    try:
        from ddpkit.troubleshoot.lint import lint_file

        path = script
        if not os.path.isfile(path) and workdir:
            path = os.path.join(workdir, script)  # the script lives in the nodes' --workdir
        findings = [f for f in lint_file(path) if f.severity != "info"]
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.debug("lint skipped for %s: %s: %s", script, type(exc).__name__, exc)
        return False
    if findings:
        sys.stderr.write(_("ddpkit: lint found {n} problem(s) in {script} (--no-lint skips "
                           "this check, --strict makes it stop the launch):").format(
                               n=len(findings), script=script) + "\n")
        for f in findings:
            sys.stderr.write(f"  {f.path}:{f.line}: {_(f.severity)}: [{f.kind}] {f.message}\n")
            sys.stderr.write("    " + _("fix: {text}").format(text=f.fix) + "\n")
    return strict and bool(findings)
