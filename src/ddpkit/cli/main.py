"""Entry point. Subcommands are imported lazily so `ddpkit --help` stays fast and torch-free."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from ddpkit import __version__
from ddpkit.errors import DdpkitError, ExitCode

# name -> (module, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "doctor": ("ddpkit.cli.doctor", "check this machine and say how to fix what is wrong"),
    "setup": ("ddpkit.cli.setup", "install what training needs (setup horovod: build Horovod)"),
    "check": ("ddpkit.cli.check", "check every node, versions and links before a run"),
    "launch": ("ddpkit.cli.launch", "start torchrun on every node from one command"),
    "diagnose": ("ddpkit.cli.diagnose", "name the cause and the fix of a failed run's log"),
    "demo": ("ddpkit.cli.demo", "run the built-in DDP sanity job (PASS/FAIL)"),
    "bench": ("ddpkit.cli.bench", "nccl-tests' collective benchmark on NCCL or Gloo"),
}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and a hint, exit code 2."""

    def __init__(self, *args, **kwargs) -> None:
        # No abbreviations: a script's --max must never be taken for our --max-restarts.
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.stderr.write(f"hint: run '{self.prog} --help' for the options\n")
        raise SystemExit(ExitCode.USAGE)


def common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print machine-readable JSON")
    common.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    return common


def _top_parser() -> Parser:
    lines = "\n".join(f"  {name:<10} {text}" for name, (_, text) in COMMANDS.items())
    parser = Parser(
        prog="ddpkit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Distributed PyTorch training that runs, is fast, and says what is wrong.",
        epilog=f"commands:\n{lines}\n\nRun 'ddpkit COMMAND --help' for a command's options.",
        usage="ddpkit [--version] COMMAND [options]",
    )
    parser.add_argument("--version", action="version", version=f"ddpkit {__version__}")
    parser.add_argument("command", nargs="?", help=argparse.SUPPRESS)
    return parser


def build_parser(name: str) -> tuple[Parser, object]:
    module = importlib.import_module(COMMANDS[name][0])
    parser = Parser(prog=f"ddpkit {name}", parents=[common_options()],
                    description=COMMANDS[name][1])
    module.add_arguments(parser)  # type: ignore[attr-defined]
    return parser, module


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _top_parser()
    if not argv or argv[0].startswith("-"):
        top.parse_args(argv[:1])  # handles --help / --version
        top.print_help()
        return ExitCode.OK
    name = argv[0]
    if name not in COMMANDS:
        top.error(f"unknown command '{name}' (choose from {', '.join(COMMANDS)})")
    parser, module = build_parser(name)
    args = parser.parse_args(argv[1:])
    return run_guarded(module, args)


def run_guarded(module: object, args: argparse.Namespace) -> int:
    """The one place that turns exceptions into messages and exit codes."""
    try:
        return int(module.run(args))  # type: ignore[attr-defined]
    except DdpkitError as exc:
        if args.debug:
            raise
        sys.stderr.write(f"ddpkit: error: {exc.message}\n")
        if exc.hint:
            sys.stderr.write(f"hint: {exc.hint}\n")
        return int(exc.code)
    except KeyboardInterrupt:
        sys.stderr.write("ddpkit: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.OK)
    except Exception as exc:  # a bug in ddpkit: one line, the traceback only with --debug
        if args.debug:
            raise
        sys.stderr.write(f"ddpkit: internal error: {type(exc).__name__}: {exc}\n")
        sys.stderr.write("hint: rerun with --debug for the traceback and report it\n")
        return int(ExitCode.FAILURE)


if __name__ == "__main__":
    raise SystemExit(main())
