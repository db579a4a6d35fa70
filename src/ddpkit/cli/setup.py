"""ddpkit setup: from bare servers to nodes that can train together.

    ddpkit setup ssh -H ...        password-less SSH to every node (asks each password once)
    ddpkit setup firewall -H ...   the smallest firewall change a run needs (--apply runs it)
    ddpkit setup torch -H ...      the same torch build every node's driver can run (--apply)
    ddpkit setup all -H ...        the three above in order, stopping at the first that fails
    ddpkit setup horovod           build Horovod 0.28.1 for the installed torch (C++17 fix)

Each is safe to run twice: a second run changes nothing and says so.
"""

from __future__ import annotations

import argparse
import sys

from ddpkit.cli.common import (
    add_host_arguments,
    add_ssh_arguments,
    err,
    hosts_from,
    ssh_options,
    tcp_port,
)
from ddpkit.errors import ExitCode, UsageError
from ddpkit.i18n import _


def _sub(subs, name: str, help_text: str) -> argparse.ArgumentParser:
    from ddpkit.cli.main import common_options

    p = subs.add_parser(name, help=help_text, description=help_text,
                        parents=[common_options()])
    # SUPPRESS: a common option given before the subcommand (`setup --json ssh`) must not be
    # reset to its default by the subcommand's parser
    for action in p._actions:
        if action.option_strings and action.dest != "help":
            action.default = argparse.SUPPRESS
    return p


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="what", metavar="{ssh,firewall,torch,all,horovod}",
                                 parser_class=type(parser))
    subs.required = True
    p = _sub(subs, "ssh", _('password-less SSH from here to every node (asks each password once)'))
    add_host_arguments(p)
    add_ssh_arguments(p)
    p.add_argument("--all-pairs", action="store_true",
                   help=_('also let every node log in to every other (mpirun, horovodrun)'))
    p = _sub(subs, "firewall", _("open what a run needs in each node's firewall"))
    add_host_arguments(p)
    add_ssh_arguments(p)
    p.add_argument("--port", type=tcp_port, default=29500, metavar="N",
                   help=_('rendezvous port on the first host (default 29500)'))
    p.add_argument("--apply", action="store_true",
                   help=_('run the commands (root or sudo -n), persist them, prove the links'))
    p.add_argument("--stop-firewall", action="store_true",
                   help=_('stop and disable the firewall instead (not recommended)'))
    p.add_argument("--python", metavar="PATH",
                   help=_('interpreter on every node for the link check (default {executable})').format(executable=sys.executable))
    p = _sub(subs, "torch", _("the same torch build on every node, for each node's driver"))
    add_host_arguments(p)
    add_ssh_arguments(p)
    p.add_argument("--version", dest="torch_version", metavar="V",
                   help=_("torch version (default: this machine's torch, else the newest on a node)"))
    p.add_argument("--python", metavar="PATH",
                   help=_('interpreter on every node (default {executable})').format(executable=sys.executable))
    p.add_argument("--apply", action="store_true", help=_('install it (pip) on every node'))
    p.add_argument("--wheel-dir", metavar="DIR",
                   help=_('install from the wheels in DIR, pushed from here (nodes need no internet)'))
    p.add_argument("--allow-downgrade", action="store_true",
                   help=_('install an older torch than a node has'))
    from ddpkit.cli.setup_all import add_all

    add_all(_sub(subs, "all", _('setup ssh, firewall and torch in order (--apply to change the firewall and install torch)')))
    p = _sub(subs, "horovod", _('build Horovod 0.28.1 for the installed torch (C++17 fix)'))
    p.add_argument("--version", default="0.28.1", help=_('Horovod release (default 0.28.1)'))
    p.add_argument("--python", metavar="PATH", default=sys.executable,
                   help=_('the interpreter whose torch Horovod is built for'))


def run(args: argparse.Namespace) -> int:
    args.json = getattr(args, "json", False)
    if args.what == "ssh":
        return _run_ssh(args)
    if args.what == "firewall":
        from ddpkit.cli.setup_nodes import run_firewall

        return run_firewall(args)
    if args.what == "torch":
        from ddpkit.cli.setup_nodes import run_torch

        return run_torch(args)
    if args.what == "all":
        from ddpkit.cli.setup_all import run_all

        return run_all(args)
    return _run_horovod(args)


def _hosts(args: argparse.Namespace):
    hosts, source = hosts_from(args)
    if source == "local":
        raise UsageError(_('ddpkit setup {what} needs the nodes').format(what=args.what),
                         _('ddpkit setup {what} -H node0,node1 (or --hostfile FILE)').format(what=args.what))
    return hosts


def _run_ssh(args: argparse.Namespace, sink: dict | None = None) -> int:
    from ddpkit.cli.setup_nodes import emit
    from ddpkit.prepare.setup.ssh import setup_ssh

    report = setup_ssh(_hosts(args), ssh_options(args), all_pairs=args.all_pairs, log=err)
    emit(args, report.to_dict(), sink)
    if not args.json:
        _print_ssh(report)
    return ExitCode.OK if report.ok else ExitCode.FAILURE


def _print_ssh(report) -> None:
    from rich.table import Table

    from ddpkit.render import console, status_text

    out = console()
    out.print(_('ddpkit setup ssh: key {key}').format(key=report.key))
    for change in report.local_changes:
        out.print(f"  here: {change}")
    table = Table()
    for col in ("node", "login", "changed", "host key"):
        table.add_column(col, overflow="fold")
    for h in report.hosts:
        table.add_row(h.host, status_text("ok" if h.state == "ok" else "fail"),
                      "\n".join(h.changes) or "-", h.fingerprint or "-")
    out.print(table)
    for h in report.hosts:
        if h.state != "ok":
            out.print(_('[bold red]FAIL[/] {host}: {message}').format(host=h.host, message=h.message))
            out.print(f"     fix: {h.fix}")
    bad_pairs = [p for p in report.pairs if not p.ok]
    if report.pairs:
        good = len(report.pairs) - len(bad_pairs)
        out.print(_('all pairs: {good} of {n_pairs} node-to-node logins work').format(good=good, n_pairs=len(report.pairs)))
    for p in bad_pairs:
        out.print(_('[bold red]FAIL[/] {src} -> {dst}: {error}').format(src=p.src, dst=p.dst, error=p.error))
        out.print(_("     fix: make '{dst}' resolve on {src} (/etc/hosts) and reachable on port 22").format(dst=p.dst, src=p.src))
    if not report.ok:
        out.print(_('some nodes are not ready; fix the above and run ddpkit setup ssh again'))
    elif report.changed:
        out.print(_('done: BatchMode login works on every node'))
    else:
        out.print(_('nothing to change: every node already accepts the key (BatchMode login works)'))


def _run_horovod(args: argparse.Namespace) -> int:
    from ddpkit.prepare.setup.horovod import setup_horovod

    report = setup_horovod(args.python, args.version, log=err)
    sys.stdout.write(report)
    err(_('ddpkit setup horovod: done; run Horovod scripts with `ddpkit launch --engine horovod`'))
    return ExitCode.OK
