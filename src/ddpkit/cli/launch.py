"""ddpkit launch: start torchrun on every node from one command, and tear all of it down
when any part fails or the user presses Ctrl-C."""

from __future__ import annotations

import argparse
import os
import secrets
import sys

from ddpkit.cli.common import (
    add_host_arguments,
    add_run_arguments,
    add_ssh_arguments,
    err,
    hosts_from,
    install_stop_handlers,
    positive,
    restore_handlers,
    ssh_options,
    writable_dir,
)
from ddpkit.errors import ExitCode, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    run = parser.add_argument_group("run")
    add_run_arguments(run)
    run.add_argument("--nproc-per-node", type=int, metavar="N",
                     help="processes per node (default: the host's slots, else 1)")
    run.add_argument("-np", dest="np", type=int, metavar="N",
                     help="total processes, filled into the hosts' slots in order (mpirun style)")
    run.add_argument("--max-restarts", type=int, default=0, metavar="N",
                     help="restart all workers up to N times after a failure (torchrun)")
    run.add_argument("--rdzv-timeout", type=int, metavar="S",
                     help="seconds nodes wait for each other at the rendezvous (torchrun: 600)")
    run.add_argument("--workdir", metavar="DIR", help="working directory on every node "
                     "(default: the current one)")
    run.add_argument("-m", "--module", action="store_true", help="run SCRIPT as a module")
    run.add_argument("--engine", choices=("torchrun", "accelerate", "horovod"), default="torchrun",
                     help="torchrun on every node (default); `accelerate launch` on every node; "
                          "or real Horovod's horovodrun from here")
    run.add_argument("--horovod", action="store_true",
                     help="run an unmodified `import horovod.torch as hvd` script on torchrun, "
                          "with ddpkit's Horovod API (no Horovod needed)")
    env = parser.add_argument_group("environment (NCCL_*, TORCH_*, GLOO_*, OMP_*, PYTHON* are "
                                    "forwarded; nothing else)")
    env.add_argument("-x", dest="export", action="append", default=[], metavar="NAME",
                     help="forward NAME from here (or NAME=VALUE), repeatable")
    env.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="set NAME=VALUE on every node, repeatable")
    out = parser.add_argument_group("output")
    out.add_argument("--dry-run", action="store_true",
                     help="print each node's command (secrets masked) and exit")
    out.add_argument("--no-preflight", action="store_true",
                     help="skip probing the nodes before starting (not recommended)")
    out.add_argument("--heartbeat-timeout", type=positive(), default=30.0, metavar="S",
                     help="a node that hears nothing from the launcher for S seconds (a cut "
                          "network) stops by itself (default 30)")
    add_ssh_arguments(parser)
    parser.add_argument("script", help="training script (or module with -m)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for the script")


def options_from(args: argparse.Namespace, script: str, script_args: list[str]):
    from ddpkit.launch.plan import LaunchOptions, parse_env_pair

    pairs = [parse_env_pair(p) for p in args.env]
    if getattr(args, "horovod", False):
        # the shim's horovod/ package is written into the node's temporary directory (@TMP@)
        current = os.environ.get("PYTHONPATH", "")
        pairs.append(("PYTHONPATH", "@TMP@/hvdshim" + (f":{current}" if current else "")))
    return LaunchOptions(
        script=script, script_args=tuple(script_args), module=args.module,
        engine=getattr(args, "engine", "torchrun"),
        nproc_per_node=args.nproc_per_node, port=args.port, max_restarts=args.max_restarts,
        python=args.python or sys.executable, workdir=os.path.abspath(args.workdir or os.getcwd()),
        run_id=f"ddpkit-{secrets.token_hex(4)}", env_names=tuple(args.export),
        env_pairs=tuple(pairs), rdzv_timeout=args.rdzv_timeout)


def run(args: argparse.Namespace) -> int:
    from ddpkit.launch.launcher import PreflightError, assign_np, prepare

    writable_dir(args.log_dir, "--log-dir")
    hosts, _ = hosts_from(args)
    if args.np is not None:
        hosts = assign_np(hosts, args.np)
    if args.workdir and not args.workdir.startswith("/") and not os.path.isdir(args.workdir):
        raise UsageError(f"--workdir {args.workdir} does not exist here", "give an absolute path")
    opts = options_from(args, args.script, args.script_args)
    ssh = ssh_options(args)
    try:
        prepared = prepare(hosts, opts, ssh, os.environ, preflight=not args.no_preflight,
                           dry_run=args.dry_run)
    except PreflightError as exc:
        report_problems(exc, args.json)
        return int(exc.code)
    if args.dry_run:
        show_plan(prepared.plan, args.json)
        return ExitCode.OK
    files = None
    if args.horovod:
        if args.engine != "torchrun":
            raise UsageError("--horovod runs on torchrun", "drop --engine, or use --engine horovod "
                             "for real Horovod instead")
        from ddpkit.compat import shim_files

        files = shim_files()
    return run_plan(prepared.plan, args, files=files)


def supervise(plan, args, **kwargs):
    """Run the plan with Ctrl-C/SIGTERM turned into a teardown of every node."""
    from ddpkit.launch.launcher import execute

    for note in plan.notes:
        err(f"ddpkit: note: {note}")
    holder: dict = {}

    def stop(signum):
        if "sup" in holder:
            holder["sup"].request_stop(signum)
        else:
            holder["pending"] = signum  # Ctrl-C before the supervisor exists: applied at once

    def register(sup) -> None:
        holder["sup"] = sup
        if "pending" in holder:
            sup.request_stop(holder["pending"])

    previous = install_stop_handlers(stop)
    try:
        return execute(plan, ssh_options(args), log_dir=args.log_dir, grace=args.grace,
                       json_mode=args.json, register=register,
                       heartbeat_timeout=getattr(args, "heartbeat_timeout", 30.0), **kwargs)
    finally:
        restore_handlers(previous)


def run_plan(plan, args, files=None) -> int:
    result = supervise(plan, args, files=files)
    findings = diagnosis(result)
    if args.json:
        from ddpkit.render import print_json

        print_json({**result.to_dict(), "diagnosis": [f.to_dict() for f in findings[:3]]})
    else:
        show_summary(result, findings)
    return result.exit_code


def diagnosis(result) -> list:
    """When a run failed, what the diagnose knowledge base makes of the output of all nodes."""
    if result.exit_code == 0 or result.reason in ("SIGINT", "SIGTERM", "SIGHUP"):
        return []
    from ddpkit.troubleshoot.diagnose import diagnose

    return diagnose(result.log_tail)


def report_problems(exc, json_mode: bool) -> None:
    if json_mode:
        from ddpkit.render import print_json

        print_json({"schema": 1, "exit_code": int(exc.code),
                    "problems": [p.to_dict() for p in exc.problems]})
    for p in exc.problems:
        err(f"ddpkit: error: {p.host.name}: {p.message}")
        err(f"  fix: {p.fix}")
    err(f"ddpkit: {exc.message}; nothing was started")


def show_plan(plan, json_mode: bool) -> None:
    if json_mode:
        from ddpkit.render import print_json

        print_json(plan.to_dict())
        return
    mode = "standalone" if plan.standalone else f"c10d at {plan.master_addr}:{plan.port}"
    print(f"# {len(plan.nodes)} node(s), world size {plan.world_size}, rendezvous {mode}, "
          f"run id {plan.run_id}")
    for note in plan.notes:
        print(f"# note: {note}")
    for node in plan.nodes:
        where = "this machine" if node.local else f"ssh {node.host.target}"
        iface = f", interface {node.ifname}" if node.ifname else ""
        print(f"# {node.host.name}: node {node.node_rank}, {node.nproc} process(es), "
              f"via {where}{iface}")
        print(node.shell())


def show_summary(result, findings=()) -> None:
    if result.exit_code == 0 and not result.reason:
        ranks = sum(len(n["ranks"]) for n in result.nodes)
        err(f"ddpkit: OK: {len(result.nodes)} node(s), {ranks} rank(s), finished in "
            f"{result.duration_s:.1f} s")
        return
    from rich.markup import escape
    from rich.table import Table

    from ddpkit.render import console

    out = console(stderr=True)
    table = Table(title="ddpkit launch: summary", title_justify="left")
    for col in ("node", "ranks", "state", "exit", "first error"):
        table.add_column(col, overflow="fold")
    style = {"ok": "green", "failed": "bold red", "ssh_error": "bold red", "stopped": "yellow"}
    for n in result.nodes:
        ranks = ",".join(map(str, n["ranks"])) or "-"
        table.add_row(n["host"], ranks, f"[{style.get(n['state'], '')}]{n['state']}[/]",
                      "-" if n["exit_code"] is None else str(n["exit_code"]), escape(n["first_error"]))
    out.print(table)
    if result.first_failure:
        first = next(n for n in result.nodes if n["host"] == result.first_failure)
        after = f" after {first['ended_after_s']:.1f} s" if first["ended_after_s"] else ""
        out.print(f"[bold red]FAILED[/]: {result.first_failure} failed first{after} "
                  f"(exit {first['exit_code']}): {escape(first['first_error']) or 'see its output above'}; "
                  "the other nodes were stopped")
    elif result.reason in ("SIGINT", "SIGTERM", "SIGHUP"):
        out.print(f"[yellow]STOPPED[/] by {result.reason}: every node was torn down")
    else:
        out.print(f"[bold red]FAILED[/] (exit {result.exit_code})")
    if findings:
        f = findings[0]
        where = f" ({f.evidence['where']})" if f.evidence.get("where") else ""
        out.print(f"[bold]diagnosis[/]: \\[{f.category}] {escape(f.title)}")
        out.print(f"  evidence{where}: {escape(f.evidence.get('text', ''))}")
        out.print(f"  [cyan]fix: {escape(f.fix)}[/]")
        out.print(f"  (ddpkit diagnose on a saved log shows all findings; source: {f.source})")
