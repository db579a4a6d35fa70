"""ddpkit stacks: where is every rank right now? py-spy on every node at once, grouped."""

from __future__ import annotations

import argparse
import json
import sys
import time

from ddpkit.cli.common import add_host_arguments, add_ssh_arguments, hosts_from, ssh_options
from ddpkit.errors import EnvironmentFailure, ExitCode, UsageError
from ddpkit.i18n import _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", nargs="?", metavar="RUN",
                        help=_("a run record (name, run id or directory; see 'ddpkit runs'); default: the running launch"))
    parser.add_argument("--last", action="store_true",
                        help=_('the latest run: its live stacks, or the ones taken when it hung'))
    parser.add_argument("--run-id", metavar="ID",
                        help=_('with -H: only this torchrun job (its --rdzv-id / TORCHELASTIC_RUN_ID); default: every job found'))
    parser.add_argument("--python", metavar="PATH",
                        help=_('interpreter on the nodes for the helper (default: {executable})').format(executable=sys.executable))
    parser.add_argument("--full", action="store_true", help=_("also print every rank's stack"))
    add_host_arguments(parser)
    add_ssh_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ddpkit.launch.probe import local_flags
    from ddpkit.launch.stackdump import take_stacks

    if args.hosts or args.hostfile:
        if args.run or args.last:
            raise UsageError(_('give either -H HOSTS or a run record, not both'),
                             _('ddpkit stacks -H node0,node1, or ddpkit stacks --last'))
        hosts, _unused = hosts_from(args)
        ssh, python, run_id = ssh_options(args), args.python or sys.executable, args.run_id or ""
        world, names = None, None
    else:
        info = pick_record(args)
        if info.state != "running":
            return show_saved(info, args)
        hosts, ssh, python, run_id = from_record(info)
        world = info.record.get("world_size")
        names = [h.name for h in hosts]
    t0 = time.monotonic()
    nodes = take_stacks(hosts, local_flags(hosts), ssh, python, run_id)
    took = time.monotonic() - t0
    reports = judge_each(nodes, world, names)
    if args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, "took_s": round(took, 2),
                    "jobs": [{"run_id": rid, **rep.to_dict()} for rid, rep in reports]})
    else:
        show(reports, took, args.full)
    found = any(p.role == "worker" or p.threads for n in nodes for p in n.procs)
    if not found:
        names = ", ".join(h.name for h in hosts)
        raise EnvironmentFailure((_('no job {run_id} found on {items}') if run_id
                                  else _('no torchrun job found on {items}')).format(
                                      run_id=run_id, items=names),
                                 _("is it running? 'ddpkit runs' lists ddpkit's launches"))
    return ExitCode.OK


def pick_record(args):
    from ddpkit.launch.runs import find_run, list_runs, runs_root

    if args.run or args.last:
        return find_run(args.run)
    running = [r for r in list_runs() if r.state == "running"]
    if not running:
        raise EnvironmentFailure(_('no running launch in {runs_root}').format(runs_root=runs_root()),
                         _("--last shows the latest run's saved stacks; -H HOSTS looks at any torchrun job"))
    return running[0]


def from_record(info):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.remote import SshOptions

    rec = info.record
    hosts = [Host(h["name"], h.get("slots"), h.get("user", "")) for h in rec.get("hosts", [])]
    ssh = rec.get("ssh") or {}
    ssh = SshOptions(**{**ssh, "options": tuple(ssh.get("options", ()))})
    return hosts, ssh, rec.get("python") or sys.executable, info.run_id


def judge_each(nodes, world, names):
    """One report per torchrun job found (-H without --run-id may find several)."""
    from dataclasses import replace

    from ddpkit.troubleshoot.stacks import judge

    ids = sorted({p.run_id for n in nodes for p in n.procs if p.role == "worker"})
    if len(ids) <= 1:
        return [(ids[0] if ids else "", judge(nodes, world, names))]
    out = []
    for rid in ids:
        mine = [replace(n, procs=tuple(p for p in n.procs if p.run_id == rid)) for n in nodes]
        out.append((rid, judge([n for n in mine if n.procs], world, None)))
    return out


def show(reports, took: float, full: bool) -> None:
    for rid, rep in reports:
        ranks = sum(len(g.ranks) for g in rep.groups)
        head = (_('ddpkit stacks: job {run_id}: {n_nodes} node(s), {ranks} rank(s), taken in {took:.1f} s')
                if len(reports) > 1 else
                _('ddpkit stacks: {n_nodes} node(s), {ranks} rank(s), taken in {took:.1f} s'))
        print(head.format(run_id=rid, n_nodes=len(rep.nodes), ranks=ranks, took=took))
        for line in rep.lines():
            print(line)
        if full:
            print_full(rep)


def print_full(rep) -> None:
    from ddpkit.troubleshoot.stacks import main_thread

    for n in rep.nodes:
        for p in sorted(n.procs, key=lambda p: (p.rank is None, p.rank or 0)):
            who = f"rank {p.rank}" if p.rank is not None else "torchrun"
            print(_('--- {who} on {host} (pid {pid})').format(who=who, host=n.host, pid=p.pid))
            for f in main_thread(p):
                print(f"    {f.get('name')} ({f.get('short_filename')}:{f.get('line')})")


def show_saved(info, args) -> int:
    """A run that has ended: the stacks taken when it hung or was interrupted, if any."""
    path = info.dir / "stacks.json"
    if not path.is_file():
        raise EnvironmentFailure(_('run {name} has ended ({state}) and no stacks were taken').format(name=info.name, state=info.state), _("its logs are in {dir}; 'ddpkit diagnose --last'").format(dir=info.dir))
    data = json.loads(path.read_text())
    if args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, "run": info.name, "state": info.state, "saved": True, **data})
        return ExitCode.OK
    taken = (_('ddpkit stacks: run {name} ended ({state}); taken when it hung:')
             if data.get("why") == "hang" else
             _('ddpkit stacks: run {name} ended ({state}); taken when it was interrupted:'))
    print(taken.format(name=info.name, state=info.state))
    txt = info.dir / "stacks.txt"
    sys.stdout.write(txt.read_text() if txt.is_file() else data.get("verdict", "") + "\n")
    return ExitCode.OK
