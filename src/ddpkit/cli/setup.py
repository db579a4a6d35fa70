"""ddpkit setup: install what distributed training needs on this machine.

    ddpkit setup horovod        build Horovod 0.28.1 for the installed torch (C++17 fix)
"""

from __future__ import annotations

import argparse
import sys

from ddpkit.errors import ExitCode


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("horovod",), help="what to set up")
    parser.add_argument("--version", default="0.28.1", help="Horovod release (default 0.28.1)")
    parser.add_argument("--python", metavar="PATH", default=sys.executable,
                        help="the interpreter whose torch Horovod is built for")


def run(args: argparse.Namespace) -> int:
    from ddpkit.prepare.setup.horovod import setup_horovod

    def log(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    report = setup_horovod(args.python, args.version, log=log)
    sys.stdout.write(report)
    log("ddpkit setup horovod: done; run Horovod scripts with `ddpkit launch --engine horovod`")
    return ExitCode.OK
