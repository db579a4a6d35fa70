"""ddpkit check: a cluster preflight that finds what would make a run hang, before it runs."""

from __future__ import annotations

import argparse
import sys

from ddpkit.cli.common import (
    add_host_arguments,
    add_ssh_arguments,
    hosts_from,
    port_from,
    positive,
    ssh_options,
    tcp_port,
)
from ddpkit.errors import ExitCode
from ddpkit.i18n import N_, _

STATE_STYLE = {"ok": "green", "refused": "bold red", "filtered": "bold red",
               "no_route": "bold red", "error": "red"}
# a cell of the link matrix, one whole label per (kind, state) (translated where shown)
LINK_CELL = {
    ("rendezvous", "ok"): N_("rdzv ok"), ("rendezvous", "refused"): N_("rdzv refused"),
    ("rendezvous", "filtered"): N_("rdzv filtered"), ("rendezvous", "no_route"): N_("rdzv no_route"),
    ("rendezvous", "error"): N_("rdzv error"),
    ("peer", "ok"): N_("peer ok"), ("peer", "refused"): N_("peer refused"),
    ("peer", "filtered"): N_("peer filtered"), ("peer", "no_route"): N_("peer no_route"),
    ("peer", "error"): N_("peer error"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    parser.add_argument("--port", type=tcp_port, default=None, metavar="N",
                        help=_('rendezvous port on the first host (default: $MASTER_PORT, else 29500, as launch)'))
    parser.add_argument("--python", metavar="PATH",
                        help=_('interpreter on every node (default: this one, {executable})').format(executable=sys.executable))
    parser.add_argument("--timeout", type=positive(), default=3.0, metavar="S",
                        help=_('seconds before an unanswered connection counts as filtered'))
    add_ssh_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ddpkit.verify.preflight import run_check

    hosts, _unused = hosts_from(args)
    status = _status(args.json)
    with status:
        report = run_check(hosts, ssh_options(args), args.python or sys.executable,
                           port_from(args)[0],
                           timeout=args.timeout)
    if args.json:
        from ddpkit.render import print_json

        print_json(report.to_dict())
    else:
        show(report)
    return ExitCode.OK if report.ok else ExitCode.FAILURE


def _status(json_mode: bool):
    """A spinner on stderr while the nodes answer (only in a terminal)."""
    import contextlib

    if json_mode or not sys.stderr.isatty():
        return contextlib.nullcontext()
    from ddpkit.render import console

    return console(stderr=True).status(_("checking nodes: SSH, doctor, links ..."))


def show(report) -> None:
    from rich.markup import escape
    from rich.table import Table

    from ddpkit.render import console

    out = console()
    nodes = Table(title=_("ddpkit check: {n} node(s) in {seconds:.1f} s").format(
        n=len(report.nodes), seconds=report.duration_s), title_justify="left")
    for col in (_("node"), "ssh", "python", "torch", "cuda", "nccl", _("driver"), _("gpus"),
                "doctor"):
        nodes.add_column(col, overflow="fold")
    for n in report.nodes:
        f = n.facts
        if n.problem:
            nodes.add_row(n.host.name, f"[bold red]{_('FAIL')}[/]", *["-"] * 6, "-")
            continue
        doctor = (n.doctor or {}).get("status", "") or "[yellow]n/a[/]"
        doctor = {"fail": f"[bold red]{_('FAIL')}[/]", "warn": f"[yellow]{_('warn')}[/]",
                  "ok": f"[green]{_('ok')}[/]"}.get(doctor, doctor)
        gpus = f"{f.get('gpu_count', 0)} x {f['gpu_model']}" if f.get("gpu_model") else str(f.get("gpu_count", 0))
        nodes.add_row(n.host.name, f"[green]{_('ok')}[/]", f.get("python", ""), f.get("torch", ""),
                      f.get("cuda", "") or "?", f.get("nccl", "") or "-", f.get("driver", "") or "-",
                      gpus, doctor)
    out.print(nodes)
    if report.mismatches:
        mm = Table(title=_("versions that differ"), title_justify="left")
        mm.add_column(_("what"))
        names = [n.host.name for n in report.nodes if n.facts]
        for name in names:
            mm.add_column(name)
        for m in report.mismatches:
            cells = []
            for name in names:
                v = escape(m["values"].get(name, "-"))
                cells.append(f"[bold red]{v}[/]" if name in m["odd"] else v)
            mm.add_row(_(m["label"]), *cells)
        out.print(mm)
    if report.links:
        _links(out, report)
    rec = report.recommend
    if rec.get("exports"):
        out.print(_('[bold]recommended settings[/] (ddpkit launch applies them itself):'))
        for line in rec["exports"]:
            out.print(f"  {line}")
        if rec.get("avoid"):
            for host, names in rec["avoid"].items():
                out.print(_('  {host}: NCCL/Gloo must not use {names}').format(host=host, names=', '.join(names)))
    for p in report.problems:
        tag = f"[bold red]{_('FAIL')}[/]" if p.severity == "fail" else f"[yellow]{_('warn')}[/]"
        out.print(f"{tag} {escape(p.where)}: {escape(p.message)}")
        out.print(_('     [cyan]fix: {escape}[/]').format(escape=escape(p.fix)))
    fails = sum(1 for p in report.problems if p.severity == "fail")
    out.print(_('[green]cluster ready[/]') if report.ok else
              _('[bold red]{fails} problem(s) would break a run[/]').format(fails=fails))


def _links(out, report) -> None:
    from rich.table import Table

    names = [n.host.name for n in report.nodes if n.facts]
    table = Table(title=_("links (row dials column)"), title_justify="left")
    table.add_column(_("from \\ to"))
    for name in names:
        table.add_column(name)
    cell: dict[tuple[str, str], list[str]] = {}
    for link in report.links:
        tag = "rdzv" if link.kind == "rendezvous" else "peer"
        label = LINK_CELL.get((link.kind, link.state))
        text = _(label) if label else f"{tag} {link.state}"
        style = STATE_STYLE.get(link.state, "")
        cell.setdefault((link.src, link.dst), []).append(f"[{style}]{text}[/]")
    for src in names:
        table.add_row(src, *["-" if src == dst else "\n".join(cell.get((src, dst), ["?"]))
                             for dst in names])
    out.print(table)
