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
    port_from,
    positive,
    restore_handlers,
    ssh_options,
    writable_dir,
)
from ddpkit.cli.habits import accept_or_refuse, add_per_node_flags, nproc_value
from ddpkit.errors import ExitCode, UsageError
from ddpkit.i18n import N_, _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    run = parser.add_argument_group(_("run"))
    add_run_arguments(run)
    run.add_argument("--nproc-per-node", "--nproc_per_node", type=nproc_value, metavar="N",
                     help=_("processes per node: a number, or as torchrun gpu (the node's GPUs), cpu (its CPUs), auto (GPUs if any, else CPUs) (default: the host's slots, else 1)"))
    run.add_argument("-np", dest="np", type=int, metavar="N",
                     help=_("total processes, filled into the hosts' slots in order (mpirun style)"))
    run.add_argument("--max-restarts", "--max_restarts", type=int, default=0, metavar="N",
                     help=_('restart all workers up to N times after a failure (torchrun; default 0)'))
    run.add_argument("--rdzv-timeout", type=int, metavar="S",
                     help=_('seconds nodes wait for each other at the rendezvous (torchrun: 600)'))
    run.add_argument("--workdir", metavar="DIR", help=_('working directory on every node (default: the current one)'))
    run.add_argument("-m", "--module", action="store_true", help=_('run SCRIPT as a module'))
    run.add_argument("--no-python", "--no_python", action="store_true",
                     help=_("SCRIPT is an executable (e.g. a shell wrapper), not a Python file (torchrun --no-python; a name without '/' is looked up in PATH)"))
    run.add_argument("--no-bootstrap", action="store_true",
                     help=_("run SCRIPT directly, not through ddpkit's exit bootstrap (which ends the process group before Python exits; also DDPKIT_NO_BOOTSTRAP=1)"))
    run.add_argument("--engine", choices=("torchrun", "accelerate", "horovod"), default="torchrun",
                     help=_("torchrun on every node (default); `accelerate launch` on every node; or real Horovod's horovodrun from here"))
    run.add_argument("--horovod", action="store_true",
                     help=_("run an unmodified `import horovod.torch as hvd` script on torchrun, with ddpkit's Horovod API (no Horovod needed)"))
    env = parser.add_argument_group(_('environment (NCCL_*, TORCH_*, GLOO_*, OMP_*, PYTHON* are forwarded; nothing else)'))
    env.add_argument("-x", dest="export", action="append", default=[], metavar="NAME",
                     help=_('forward NAME from here (or NAME=VALUE), repeatable'))
    env.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help=_('set NAME=VALUE on every node, repeatable'))
    out = parser.add_argument_group(_("output"))
    out.add_argument("--dry-run", action="store_true",
                     help=_("print each node's command (secrets masked), then what the preflight found; start nothing (exit 0 when the run could start, else 1)"))
    safety = parser.add_argument_group(_('preflight and teardown'))
    safety.add_argument("--no-preflight", action="store_true",
                        help=_('skip probing the nodes before starting (not recommended)'))
    safety.add_argument("--no-lint", action="store_true",
                        help=_("skip 'ddpkit lint' of the script before starting"))
    safety.add_argument("--strict", action="store_true",
                        help=_("do not start when 'ddpkit lint' finds an error or a warning"))
    safety.add_argument("--heartbeat-timeout", type=positive(), default=30.0, metavar="S",
                        help=_('a node that hears nothing from the launcher for S seconds (a cut network) stops by itself (default 30)'))
    safety.add_argument("--hang-timeout", type=positive(), metavar="S",
                        help=_("no rank printed a line for S seconds: take every rank's stack, name the straggler, tear down (default: off; see README)"))
    add_per_node_flags(parser)
    add_ssh_arguments(parser)
    parser.add_argument("script", help=_('training script (or module with -m)'))
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help=_('arguments for the script'))


def options_from(args: argparse.Namespace, script: str, script_args: list[str]):
    from ddpkit.launch.envvars import parse_env_pair
    from ddpkit.launch.plan import LaunchOptions

    pairs = [parse_env_pair(p) for p in args.env]
    if getattr(args, "horovod", False):
        # the shim's horovod/ package is written into the node's temporary directory (@TMP@)
        current = os.environ.get("PYTHONPATH", "")
        pairs.append(("PYTHONPATH", "@TMP@/hvdshim" + (f":{current}" if current else "")))
    port, fixed = port_from(args)
    run_id = f"ddpkit-{secrets.token_hex(4)}"
    if getattr(args, "hang_timeout", None):
        from ddpkit.launch.stackdump import dist_version
        from ddpkit.troubleshoot.hang import flight_recorder_env

        pairs += flight_recorder_env(run_id, os.environ, dist_version("torch"))
    return LaunchOptions(
        script=script, script_args=tuple(script_args), module=args.module,
        engine=getattr(args, "engine", "torchrun"), no_python=getattr(args, "no_python", False),
        nproc_per_node=args.nproc_per_node, port=port, fixed_port=fixed,
        max_restarts=args.max_restarts,
        python=args.python or sys.executable, workdir=os.path.abspath(args.workdir or os.getcwd()),
        run_id=run_id, env_names=tuple(args.export),
        env_pairs=tuple(pairs), rdzv_timeout=args.rdzv_timeout,
        bootstrap=not (getattr(args, "no_bootstrap", False)
                       or os.environ.get("DDPKIT_NO_BOOTSTRAP", "") not in ("", "0")))


def run(args: argparse.Namespace) -> int:
    from ddpkit.launch.launcher import PreflightError, assign_np, prepare

    writable_dir(args.log_dir, "--log-dir")
    hosts, _unused = hosts_from(args)
    if args.torchrun_flags:
        port = accept_or_refuse(args.torchrun_flags, getattr(args, "argv", []),
                                args.script_args, len(hosts))
        if port is not None and args.port is None:
            args.port = port
    if args.np is not None:
        hosts = assign_np(hosts, args.np)
    if args.workdir and not args.workdir.startswith("/") and not os.path.isdir(args.workdir):
        raise UsageError(_('--workdir {workdir} does not exist here').format(workdir=args.workdir), _('give an absolute path'))
    from ddpkit.cli.lint import before_launch

    if before_launch(args.script, module=args.module, strict=args.strict, no_lint=args.no_lint,
                     workdir=args.workdir):
        return ExitCode.FAILURE
    opts = options_from(args, args.script, args.script_args)
    ssh = ssh_options(args)
    try:
        prepared = prepare(hosts, opts, ssh, os.environ, preflight=not args.no_preflight,
                           dry_run=args.dry_run, keep_sessions=True)
    except PreflightError as exc:
        report_problems(exc, args.json)
        return int(exc.code)
    if args.dry_run:
        return show_dry_run(prepared, args.json)
    try:
        files = None
        if args.horovod:
            if args.engine != "torchrun":
                raise UsageError(_('--horovod runs on torchrun'), _('drop --engine, or use --engine horovod for real Horovod instead'))
            from ddpkit.compat import shim_files

            files = shim_files()
        return run_plan(prepared.plan, args, files=files, probes=prepared.probes,
                        agents=prepared.agents)
    finally:
        if prepared.agents is not None:
            prepared.agents.close()  # a no-op once the run took the sessions over


def supervise(plan, args, **kwargs):
    """Run the plan with Ctrl-C/SIGTERM turned into a teardown of every node."""
    from ddpkit.launch.launcher import execute

    for note in plan.notes:
        err(_('ddpkit: note: {note}').format(note=note))
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
        log_dir = kwargs.pop("log_dir", args.log_dir)
        return execute(plan, ssh_options(args), log_dir=log_dir, grace=args.grace,
                       json_mode=args.json, register=register,
                       heartbeat_timeout=getattr(args, "heartbeat_timeout", 30.0), **kwargs)
    finally:
        restore_handlers(previous)


def run_plan(plan, args, files=None, probes=(), agents=None) -> int:
    from ddpkit.cli.records import finish_record, show_stall, start_record

    record, watch = start_record(plan, args, probes)  # the run record holds the logs
    result = supervise(plan, args, files=files, on_stall=watch,
                       log_dir=str(record.dir) if record else args.log_dir,
                       hang_timeout=args.hang_timeout or 0.0, agents=agents)
    findings = diagnosis(result, watch)
    summary = finish_record(record, result, findings, watch)
    if args.json:
        from ddpkit.render import print_json

        print_json(summary)
    else:
        show_summary(result, findings)
        show_stall(watch, args.hang_timeout)
    return result.exit_code


def diagnosis(result, watch=None) -> list:
    """When a run failed, what the diagnose knowledge base makes of the output of all nodes;
    for a run that hung, the causes of a hang, the stacks the watch took first."""
    # Ctrl-C is the user's own stop, even on a run silent for a few seconds: not a verdict
    if result.exit_code == 0 or result.reason in ("SIGINT", "SIGTERM", "SIGHUP"):
        return []
    if getattr(result, "shutdown_crash", ""):
        return []  # the summary names it: a crash after the script ended (launch/shutdown.py)
    from ddpkit.troubleshoot.diagnose.matcher import diagnose_report

    lines = result.log_tail
    if result.reason == "hang":  # torchrun's own lines there are our teardown's SIGTERM trace
        lines = tuple(ln for ln in lines if ":- | " not in ln)
        stacks = watch.to_dict() if watch is not None else None
        return diagnose_report(lines, hung=True, stacks=stacks).findings
    return diagnose_report(lines).findings


def report_problems(exc, json_mode: bool) -> None:
    if json_mode:
        from ddpkit.render import print_json

        print_json({"schema": 1, "exit_code": int(exc.code),
                    "problems": [p.to_dict() for p in exc.problems]})
    for p in exc.problems:
        err(_('ddpkit: error: {name}: {message}').format(name=p.host.name, message=p.message))
        err(f"  fix: {p.fix}")
    err(_('ddpkit: {message}; nothing was started').format(message=exc.message))


def show_dry_run(prepared, json_mode: bool) -> int:
    """The plan first, then what the preflight found; exit 0 when the run could start, else
    the code the launch would have failed with (1, or 2 for a wrong command line)."""
    from ddpkit.launch.launcher import PreflightError

    problems = list(prepared.problems)
    code = int(PreflightError(problems).code) if problems else int(ExitCode.OK)
    if json_mode:
        from ddpkit.render import print_json

        print_json({**prepared.plan.to_dict(), "exit_code": code,
                    "problems": [p.to_dict() for p in problems]})
        return code
    show_plan(prepared.plan, False)
    sys.stdout.flush()
    for p in problems:
        err(_('ddpkit: error: {name}: {message}').format(name=p.host.name, message=p.message))
        err(f"  fix: {p.fix}")
    if problems:
        err(_('ddpkit: preflight: {n_problems} node(s) not ready: {items}; a launch would stop here').format(n_problems=len(problems), items=', '.join(p.host.name for p in problems)))
    return code


def show_plan(plan, json_mode: bool) -> None:
    if json_mode:
        from ddpkit.render import print_json

        print_json(plan.to_dict())
        return
    mode = _("c10d at {address}").format(address=f"{plan.master_addr}:{plan.port}")
    if plan.standalone and "--standalone" in plan.nodes[0].argv:
        mode = _("standalone (torchrun picks a free port; --port or MASTER_PORT fixes one)")
    print(_('# {n_nodes} node(s), world size {world_size}, rendezvous {mode}, run id {run_id}').format(n_nodes=len(plan.nodes), world_size=plan.world_size, mode=mode, run_id=plan.run_id))
    for note in plan.notes:
        print(_("# note: {note}").format(note=note))
    if any(a.startswith("@TMP@/ddpkit_bootstrap.py") for n in plan.nodes for a in n.argv):
        print(_("# workers run the script through ddpkit's exit bootstrap (written to @TMP@, a temporary directory on each node; --no-bootstrap runs the script directly)"))
    if any(a == "@TMP@/bin/torchrun" for n in plan.nodes for a in n.argv):
        print(_("# @TMP@/bin/torchrun is torch.distributed.run whose tee shows every line a rank wrote (torch's own can drop a rank's last lines)"))
    for node in plan.nodes:
        where = _("this machine") if node.local else f"ssh {node.host.target}"
        iface = _(", interface {ifname}").format(ifname=node.ifname) if node.ifname else ""
        print(_('# {name}: node {node_rank}, {nproc} process(es), via {where}{iface}').format(name=node.host.name, node_rank=node.node_rank, nproc=node.nproc, where=where, iface=iface))
        print(node.shell())


# a node's state is an id in JSON and a word in the summary table: marked for the catalog here
STATES = (N_("ok"), N_("failed"), N_("stopped"), N_("ssh_error"), N_("running"))


def show_summary(result, findings=()) -> None:
    if result.exit_code == 0 and not result.reason:
        # a rank that printed nothing still ran: count the processes the plan started
        ranks = sum(max(n.get("nproc") or 0, len(n["ranks"])) for n in result.nodes)
        err(_("ddpkit: OK: {nodes} node(s), {ranks} rank(s), finished in {seconds:.1f} s").format(
            nodes=len(result.nodes), ranks=ranks, seconds=result.duration_s))
        return
    from rich.markup import escape
    from rich.table import Table

    from ddpkit.render import console

    out = console(stderr=True)
    table = Table(title=_("ddpkit launch: summary"), title_justify="left")
    for col in (N_("node"), N_("ranks"), N_("state"), N_("exit"), N_("first error")):
        table.add_column(_(col), overflow="fold")
    style = {"ok": "green", "failed": "bold red", "ssh_error": "bold red", "stopped": "yellow"}
    for n in result.nodes:
        ranks = ",".join(map(str, n["ranks"])) or "-"
        first_error = n["first_error"]
        if n["state"] == "stopped" and result.reason in ("SIGINT", "SIGTERM", "SIGHUP", "hang") \
                and "got signal" in first_error:
            first_error = _("stopped by ddpkit")  # torchrun's SignalException: our teardown
        table.add_row(n["host"], ranks, f"[{style.get(n['state'], '')}]{_(n['state'])}[/]",
                      "-" if n["exit_code"] is None else str(n["exit_code"]), escape(first_error))
    out.print(table)
    if result.first_failure and getattr(result, "shutdown_crash", ""):
        # the bootstrap reported the end of the script first: not a failure of training
        out.print(_("[bold red]FAILED[/] at exit on {first_failure} (exit {exit_code}): {escape}; a crash after the script ended, in the interpreter's own shutdown (README: Exit status you can trust)").format(first_failure=result.first_failure, exit_code=result.exit_code, escape=escape(result.shutdown_crash)))
    elif result.first_failure:
        first = next(n for n in result.nodes if n["host"] == result.first_failure)
        after = _(" after {seconds:.1f} s").format(seconds=first["ended_after_s"]) \
            if first["ended_after_s"] else ""
        out.print(_('[bold red]FAILED[/]: {first_failure} failed first{after} (exit {exit_code}): {value}{value2}').format(first_failure=result.first_failure, after=after, exit_code=first['exit_code'], value=escape(first['first_error']) or _('see its output above'), value2=_("; the other nodes were stopped") if len(result.nodes) > 1 else ""))
    elif result.reason in ("SIGINT", "SIGTERM", "SIGHUP"):
        out.print(_('[yellow]STOPPED[/] by {reason}: every node was torn down').format(reason=result.reason))
    elif result.reason == "hang":
        out.print(_('[bold red]HUNG[/]: no rank printed a line for --hang-timeout seconds; every node was torn down'))
    else:
        out.print(_('[bold red]FAILED[/] (exit {exit_code})').format(exit_code=result.exit_code))
    if findings:
        f = findings[0]
        where = f" ({f.evidence['where']})" if f.evidence.get("where") else ""
        out.print(_('[bold]diagnosis[/]: \\[{category}] {escape}').format(category=f.category, escape=escape(f.title)))
        if f.evidence.get("basis") == "prior":  # a cause of hangs no line points at
            out.print(_("  no line points here; the log stops at: {text}").format(
                text=escape(f.evidence.get("text", ""))))
        else:
            out.print(_("  evidence{where}: {text}").format(
                where=where, text=escape(f.evidence.get("text", ""))))
        if f.category == "unknown":  # no known cause: say where to look next, not a guess
            out.print(_('  next: `ddpkit diagnose --last` lists the decisive lines of every rank; `ddpkit check -H ...` tests the nodes'))
        else:
            out.print(_('  [cyan]fix: {escape}[/]').format(escape=escape(f.fix)))
            out.print(_('  (ddpkit diagnose --last shows all findings; source: {source})').format(source=f.source))
