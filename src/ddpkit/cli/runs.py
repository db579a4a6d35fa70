"""ddpkit runs: the records of recent launches (state, nodes, duration), and pruning."""

from __future__ import annotations

import argparse
import time

from ddpkit.errors import ExitCode
from ddpkit.i18n import _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--limit", type=int, default=20, metavar="N",
                        help=_('show the N most recent runs (default 20)'))
    parser.add_argument("--prune", action="store_true",
                        help=_('remove old records now (launch does it on every start)'))
    parser.add_argument("--keep", type=int, metavar="N",
                        help=_('with --prune: records to keep (default 50)'))
    parser.add_argument("--max-size", metavar="SIZE",
                        help=_('with --prune: total size to keep, e.g. 500M (default 512M)'))


def run(args: argparse.Namespace) -> int:
    from ddpkit.launch import runs

    root = runs.runs_root()
    removed: list[str] = []
    if args.prune:
        removed = runs.prune(root, keep=runs.KEEP if args.keep is None else max(0, args.keep),
                             max_bytes=runs.parse_size(args.max_size) if args.max_size
                             else runs.MAX_BYTES)
    infos = runs.list_runs(root)[: max(0, args.limit)]
    if args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, "dir": str(root), "removed": removed,
                    "runs": [i.to_dict() for i in infos]})
        return ExitCode.OK
    if removed:
        print(_('removed {n_removed} old record(s)').format(n_removed=len(removed)))
    if not infos:
        print(_("no run records in {root} ('ddpkit launch' writes one per run)").format(root=root))
        return ExitCode.OK
    show(infos, root)
    return ExitCode.OK


def show(infos, root) -> None:
    """Plain columns, the verdict last and whole: a table squeezed into 80 columns (a pipe,
    a log) would cut the run names people copy from it."""
    rows = [("RUN", "STATE", "NODES", "STARTED", "DURATION", "EXIT", "VERDICT")]
    for i in infos:
        rows.append((i.name, i.state, ",".join(i.hosts) or "-",
                     time.strftime("%m-%d %H:%M:%S", time.localtime(i.started)),
                     "-" if i.duration_s is None else f"{i.duration_s:.1f} s",
                     "-" if i.exit_code is None else str(i.exit_code), i.verdict[:160]))
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)) + "  " + r[6])
    print(_("({n_infos} run(s) in {root}; logs and stacks are in each run's directory)").format(n_infos=len(infos), root=root))
