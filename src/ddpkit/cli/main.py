"""Entry point. Subcommands are imported lazily so `ddpkit --help` stays fast and torch-free."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from ddpkit import __version__
from ddpkit.cli import argparse_i18n
from ddpkit.errors import DdpkitError, ExitCode
from ddpkit.i18n import N_, _, language, set_language

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("ddpkit.cli.doctor", N_("check this machine and say how to fix what is wrong")),
    "setup": ("ddpkit.cli.setup", N_("install what training needs (setup horovod: build Horovod)")),
    "check": ("ddpkit.cli.check", N_("check every node, versions and links before a run")),
    "launch": ("ddpkit.cli.launch", N_("start torchrun on every node from one command")),
    "diagnose": ("ddpkit.cli.diagnose", N_("name the cause and the fix of a failed run's log")),
    "stacks": ("ddpkit.cli.stacks", N_("where every rank is stuck: Python stacks of a running job")),
    "runs": ("ddpkit.cli.runs", N_("recent launches: state, nodes, duration, where their logs are")),
    "lint": ("ddpkit.cli.lint", N_("find a training script's distributed mistakes before a run")),
    "demo": ("ddpkit.cli.demo", N_("run the built-in DDP sanity job (PASS/FAIL)")),
    "bench": ("ddpkit.cli.bench", N_("nccl-tests' collective benchmark on NCCL or Gloo")),
}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and a hint, exit code 2."""

    def __init__(self, *args, **kwargs) -> None:
        # No abbreviations: a script's --max must never be taken for our --max-restarts.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(_("{prog}: error: {message}").format(prog=self.prog, message=message)
                         + "\n")
        sys.stderr.write(_("hint: run '{command}' for the options").format(
            command=f"{self.prog} --help") + "\n")
        raise SystemExit(ExitCode.USAGE)


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help=_("print machine-readable JSON"))
    common.add_argument("--debug", action="store_true", help=_("show tracebacks and debug logs"))
    common.add_argument("--lang", choices=("en", "zh", "zh_CN"), default=None,
                        help=_("language of the messages (default: from LANG/LC_ALL; "
                               "--json is always English)"))
    return common


def _early_language(argv: list[str]) -> list[str]:
    """Pick the language before any parser is built (so --help is translated too); a leading
    `--lang X` (ddpkit --lang zh doctor) is taken off the command line."""
    lang = None
    head = argv[:argv.index("--")] if "--" in argv else argv
    for i, arg in enumerate(head):
        if arg == "--lang" and i + 1 < len(head):
            lang = head[i + 1]
        elif arg.startswith("--lang="):
            lang = arg.split("=", 1)[1]
    set_language(lang if lang in ("en", "zh", "zh_CN") else None)
    if argv[:1] == ["--lang"]:
        return argv[2:]
    if argv[:1] and argv[0].startswith("--lang="):
        return argv[1:]
    return argv


def _top_parser() -> Parser:
    lines = "\n".join(f"  {name:<10} {_(text)}" for name, (__, text) in COMMANDS.items())
    parser = Parser(
        prog="ddpkit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_("Distributed PyTorch training that runs, is fast, and says what is wrong."),
        epilog=_("commands:") + f"\n{lines}\n\n"
        + _("Run '{command}' for a command's options.").format(command="ddpkit COMMAND --help"),
        usage="ddpkit [--version] [--lang en|zh] COMMAND [options]",
    )
    parser.add_argument("--version", action="version", version=f"ddpkit {__version__}")
    parser.add_argument("command", nargs="?", help=argparse.SUPPRESS)
    return parser


def build_parser(name: str) -> tuple[Parser, object]:
    module = importlib.import_module(COMMANDS[name][0])
    parser = Parser(prog=f"ddpkit {name}", parents=[common_options()],
                    description=_(COMMANDS[name][1]))
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return parser, module


def main(argv: Sequence[str] | None = None) -> int:
    argv = _early_language(list(sys.argv[1:] if argv is None else argv))
    argparse_i18n.install()
    top = _top_parser()
    if not argv:
        # no command is a usage error, as in git (which prints its usage and exits 1); ddpkit's
        # code for a wrong command line is 2, as argparse's
        top.print_help(sys.stderr)
        return ExitCode.USAGE
    if argv[0].startswith("-"):
        top.parse_args(argv[:1])  # handles --help / --version
        top.error(_("unknown option '{option}' before the command").format(option=argv[0]))
    name = argv[0]
    if name not in COMMANDS:
        top.error(_("unknown command '{name}' (choose from {choices})").format(
            name=name, choices=", ".join(COMMANDS)))
    parser, module = build_parser(name)
    args = parser.parse_args(argv[1:])
    # JSON is for programs: its text stays English whatever the locale
    # JSON stays English; else --lang after the command, else the one before it (already set)
    set_language("en" if args.json else (args.lang or language()))
    args.argv = argv[1:]  # as typed, for messages that rebuild the command (cli/habits.py)
    return run_guarded(module, args)


def run_guarded(module: object, args: argparse.Namespace) -> int:
    """The one place that turns exceptions into messages and exit codes."""
    try:
        return int(module.run(args))  # type: ignore[attr-defined]
    except DdpkitError as exc:
        if args.debug:
            raise
        sys.stderr.write(_("ddpkit: error: {message}").format(message=exc.message) + "\n")
        if exc.hint:
            sys.stderr.write(_("hint: {hint}").format(hint=exc.hint) + "\n")
        return int(exc.code)
    except KeyboardInterrupt:
        sys.stderr.write(_("ddpkit: interrupted") + "\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug in ddpkit: one line, the traceback only with --debug
        if args.debug:
            raise
        sys.stderr.write(_("ddpkit: internal error: {error}").format(
            error=f"{type(exc).__name__}: {exc}") + "\n")
        sys.stderr.write(_("hint: rerun with --debug for the traceback and report it") + "\n")
        return int(ExitCode.FAILURE)


if __name__ == "__main__":
    raise SystemExit(main())
