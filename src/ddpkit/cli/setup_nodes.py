"""`ddpkit setup firewall` and `ddpkit setup torch`: plans per node, printed or applied
(the subcommands' arguments are in cli/setup.py)."""

from __future__ import annotations

import argparse
import sys

from ddpkit.cli.common import err, ssh_options
from ddpkit.errors import ExitCode
from ddpkit.i18n import _


def _hosts(args: argparse.Namespace):
    from ddpkit.cli.setup import _hosts as hosts

    return hosts(args)


# ---- firewall -------------------------------------------------------------------------------

def emit(args: argparse.Namespace, result: dict, sink: dict | None) -> None:
    """--json output, or the result handed to `setup all` (sink), which prints one document."""
    from ddpkit.render import print_json

    if sink is not None:
        sink.update(result)
    elif args.json:
        print_json(result)


def run_firewall(args: argparse.Namespace, sink: dict | None = None) -> int:
    from ddpkit.prepare.setup.firewall import apply_plan, plan_firewall

    hosts, ssh = _hosts(args), ssh_options(args)
    if args.stop_firewall:
        err(_('ddpkit setup firewall: WARNING: --stop-firewall turns the firewall off: every port of these nodes is then open to every network they are on. Trusting the cluster subnet (the default) is enough for training.'))
    plan = plan_firewall(hosts, ssh, args.port, stop=args.stop_firewall)
    result: dict = plan.to_dict()
    code = ExitCode.OK
    if args.apply and plan.changes_needed:
        applied = apply_plan(hosts, ssh, plan)
        result["applied"] = applied
        failed = {h: why for h, why in applied.items() if why}
        if failed:
            code = ExitCode.FAILURE
        after = plan_firewall(hosts, ssh, args.port, stop=False)
        result["after"] = after.to_dict()
        if not args.json:
            _print_plan(plan, applied=applied)
            for host, why in failed.items():
                err(_('ddpkit: error: {host}: applying the firewall change failed: {why}').format(host=host, why=why))
    elif not args.json:
        _print_plan(plan, applied=None if not args.apply else {})
    if args.apply:
        report = _prove_links(hosts, ssh, args)
        result["links"] = [link.to_dict() for link in report.links]
        bad = [link for link in report.links if link.state != "ok"]
        unreachable = any(n.problem for n in report.nodes)
        result["links_ok"] = not bad and not unreachable
        if not result["links_ok"]:
            code = ExitCode.FAILURE
        if not args.json:
            _print_links(report, bad, unreachable)
    elif any(n.error for n in plan.nodes):
        code = ExitCode.FAILURE
    emit(args, result, sink)
    return code


def _print_plan(plan, applied: dict | None) -> None:
    from rich.markup import escape

    from ddpkit.render import console

    out = console()
    out.print(_('ddpkit setup firewall: rendezvous port {port} on {host}, cluster subnet {subnet}').format(port=plan.port, host=plan.nodes[0].host, subnet=plan.subnet))
    for n in plan.nodes:
        head = (_("[bold]{host}[/] ({firewall}, via sudo)") if n.access == "sudo"
                else "[bold]{host}[/] ({firewall})").format(host=n.host, firewall=n.firewall)
        if n.error and not n.steps:
            out.print(_('{head}: [bold red]cannot read the firewall[/]: {escape}').format(head=head, escape=escape(n.error)))
            out.print(_('     [cyan]fix: {escape}[/]').format(escape=escape(n.fix)))
            continue
        if not n.steps:
            out.print(_('{head}: nothing to change (a run gets through)').format(head=head))
            continue
        state = ""
        if applied is not None:
            why = applied.get(n.host, "")
            state = (" [green]" + _("applied") + "[/]" if not why else
                     " " + _("[bold red]FAILED[/]: {why}").format(why=escape(why)))
        out.print(f"{head}:{state}")
        for step in n.steps + n.persist:
            out.print(f"  [dim]# {escape(step.why)}[/]")
            out.print(f"  {escape(step.shown(n.access == 'sudo'))}", soft_wrap=True)
        for note in n.notes:
            out.print("  " + _("[yellow]note:[/] {note}").format(note=escape(note)),
                      soft_wrap=True)
        if n.error:
            out.print(_('  [bold red]{escape}[/]; [cyan]fix: {escape2}[/]').format(escape=escape(n.error), escape2=escape(n.fix)))
    if applied is None:
        if plan.changes_needed:
            out.print(_('run again with --apply to make these changes (as root, or with sudo -n)'))
        else:
            out.print(_("nothing to change: every node's firewall lets a run through"))
    elif not plan.changes_needed:
        out.print(_("nothing to change: every node's firewall lets a run through"))


def _prove_links(hosts, ssh, args):
    """The link matrix of `ddpkit check`: real connections to the rendezvous port and between
    every pair of nodes on a random port."""
    from ddpkit.verify.preflight import run_check

    return run_check(hosts, ssh, args.python or sys.executable, args.port, peers=True)


def _print_links(report, bad, unreachable) -> None:
    from ddpkit.cli.check import _links
    from ddpkit.render import console

    out = console()
    if report.links:
        _links(out, report)
    if unreachable:
        out.print(_('[bold red]FAIL[/] some nodes could not be checked: run ddpkit check -H ...'))
    elif bad:
        out.print(_('[bold red]FAIL[/] {n_bad} of {n_links} links still blocked: run ddpkit check -H ... for the cause').format(n_bad=len(bad), n_links=len(report.links)))
    else:
        out.print(_('[green]links ok[/]: {n_links} of {n_links} (rendezvous and every pair of nodes)').format(n_links=len(report.links)))


# ---- torch ----------------------------------------------------------------------------------

def torch_wheels(args: argparse.Namespace) -> list[str] | None:
    """The file names in --wheel-dir (None without it); a usage error unless torch is there."""
    import os

    from ddpkit.errors import UsageError
    from ddpkit.prepare.setup.torch import parse_wheels

    if not args.wheel_dir:
        return None
    if not os.path.isdir(args.wheel_dir):
        raise UsageError(_('--wheel-dir {wheel_dir} is not a directory').format(wheel_dir=args.wheel_dir),
                         _('pip download torch==VERSION -d DIR first (on a machine with internet), then give that DIR'))
    wheels = sorted(os.listdir(args.wheel_dir))
    if not parse_wheels(wheels):
        raise UsageError(_('no torch wheel in --wheel-dir {wheel_dir}').format(wheel_dir=args.wheel_dir),
                         _('pip download torch==VERSION -d DIR'))
    return wheels


def run_torch(args: argparse.Namespace, sink: dict | None = None) -> int:
    from ddpkit.errors import EnvironmentFailure
    from ddpkit.prepare.setup import torch as setup
    from ddpkit.prepare.torchinfo import torch_facts

    hosts, ssh = _hosts(args), ssh_options(args)
    python = args.python or sys.executable
    wheels = torch_wheels(args)
    nodes = setup.read_nodes(hosts, ssh, python)
    asked = args.torch_version
    if asked is None and wheels is not None:
        asked = setup.parse_wheels(wheels)[0][0].split("+")[0]
    here = torch_facts().version if asked is None else ""
    version = setup.choose_version(asked, here, nodes)
    plan = setup.plan_torch(nodes, version, python=python, wheels=wheels,
                            allow_downgrade=args.allow_downgrade)
    result: dict = plan.to_dict()
    if not args.json:
        _print_torch(plan, nodes, apply=args.apply)
    if args.apply and plan.ok:
        done = setup.install(hosts, ssh, plan, wheel_dir=args.wheel_dir,
                             reread=lambda hs: setup.read_nodes(hs, ssh, python), log=err)
        after = {n.host: n.torch for n in setup.read_nodes(hosts, ssh, python)}
        result["installed"], result["after"] = done, after
        wrong = {s.host: after.get(s.host, "") for s in plan.steps
                 if s.action in ("keep", "install") and after.get(s.host) != s.want}
        failed = {h: why for h, why in done.items() if why}
        emit(args, result, sink)
        for host, why in failed.items():
            err(_('ddpkit: error: {host}: installing torch failed: {why}').format(host=host, why=why))
        if failed or wrong:
            bad = ", ".join((_("{host} has {version}") if v else _("{host} has no torch")).format(
                host=h, version=v) for h, v in wrong.items())
            raise EnvironmentFailure(_('torch is not the same everywhere after installing: {bad}').format(bad=bad),
                                     _('see the pip output above; run ddpkit setup torch again'))
        if not args.json:
            err(_('ddpkit setup torch: every node has torch {value}').format(value=plan.steps[0].want if plan.steps else '')
                if done else _('ddpkit setup torch: nothing to change: every node has it already'))
        return ExitCode.OK
    emit(args, result, sink)
    return ExitCode.OK if plan.ok else ExitCode.FAILURE


def _print_torch(plan, nodes, apply: bool) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ddpkit.prepare.setup import torch as setup
    from ddpkit.render import console

    out = console()
    table = Table(title=_('ddpkit setup torch: torch {version} on {n_nodes} node(s)').format(version=plan.version, n_nodes=len(nodes)),
                  title_justify="left")
    for col in (_("node"), "python", _("driver"), _("has"), _("gets"), _("action")):
        table.add_column(col, overflow="fold")
    info = {n.host: n for n in nodes}
    for s in plan.steps:
        n = info[s.host]
        change = setup.CHANGES.get(s.reason)
        action = {"keep": "[green]" + _("nothing to change") + "[/]",
                  "install": escape(_(change) if change else s.reason),
                  "refuse": "[bold red]" + _("refused") + "[/]",
                  "error": "[bold red]" + _("FAIL") + "[/]"}[s.action]
        table.add_row(s.host, n.python or "-", n.driver or _("no GPU"), s.have or "-",
                      s.want or "-", action)
    out.print(table)
    for note in plan.notes:
        out.print(_("[yellow]note:[/] {note}").format(note=escape(note)), soft_wrap=True)
    for s in plan.steps:
        if s.action == "install":
            shown = s.command.replace("WHEEL_DIR", _("/tmp/ddpkit-wheels-... (--wheel-dir, "
                                                     "pushed from here)"))
            out.print(f"  {s.host}: {escape(shown)}", soft_wrap=True)
        elif s.action in ("refuse", "error"):
            out.print(_('[bold red]FAIL[/] {host}: {escape}').format(host=s.host, escape=escape(s.reason)))
            out.print(_('     [cyan]fix: {escape}[/]').format(escape=escape(s.fix)))
    installs = sum(1 for s in plan.steps if s.action == "install")
    if not installs and plan.ok:
        out.print(_('nothing to change: every node has the same torch build'))
    elif not apply and plan.ok:
        out.print(_("run again with --apply to install (each node's own pip)"))
