"""ddpkit doctor: check this machine; every problem comes with the command that fixes it."""

from __future__ import annotations

import argparse

from ddpkit.cli.common import tcp_port
from ddpkit.errors import ExitCode
from ddpkit.i18n import _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=tcp_port, default=None, metavar="N",
                        help=_("the rendezvous/master port to check (default: $MASTER_PORT or "
                               "29500)"))


def run(args: argparse.Namespace) -> int:
    from ddpkit.prepare.doctor import run_doctor

    report = run_doctor(port=args.port)
    if args.json:
        from ddpkit.render import print_json

        print_json(report.to_dict())
    else:
        show(report)
    return ExitCode.FAILURE if report.status.value == "fail" else ExitCode.OK


def show(report) -> None:
    from rich.table import Table
    from rich.text import Text

    from ddpkit.render import console, status_text

    out = console()
    table = Table(title=_('ddpkit doctor: {hostname}').format(hostname=report.snapshot.hostname), title_justify="left",
                  show_lines=False, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column(_("check"), no_wrap=True)
    table.add_column(_("result"), overflow="fold")
    for r in report.ordered():
        body = Text(r.summary)
        if r.status.value in ("fail", "warn"):
            if r.detail:
                body.append(f"\n{r.detail}", style="dim")
            if r.hint:
                body.append("\n" + _("fix: "), style="bold cyan")
                body.append(r.hint, style="cyan")
        table.add_row(status_text(r.status.value), r.id, body)
    out.print(table)
    counts = {s: sum(1 for r in report.results if r.status.value == s) for s in ("fail", "warn", "ok")}
    verdict = _("problems found") if counts["fail"] else (
        _("ready, with warnings") if counts["warn"] else _("ready"))
    out.print(_("{failed} failed, {warnings} warnings, {ok} ok: {verdict}").format(
        failed=counts["fail"], warnings=counts["warn"], ok=counts["ok"], verdict=verdict))
