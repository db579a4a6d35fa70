"""Launch as a library: hosts -> probe -> plan -> supervise. Used by `launch` and `demo`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from ddpkit.errors import EnvironmentFailure, UsageError
from ddpkit.i18n import _
from ddpkit.launch.agents import Agents
from ddpkit.launch.hosts import Host
from ddpkit.launch.output import Printer, RunResult
from ddpkit.launch.plan import LaunchOptions, NodeFacts, Plan, make_plan
from ddpkit.launch.probe import LOCAL_NAMES, NodeProblem, Probe, local_flags, probe_here, probe_with
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.supervise import Supervisor


class PreflightError(EnvironmentFailure):
    """One or more nodes cannot run the job; each problem names its node and fix."""

    def __init__(self, problems: list[NodeProblem]) -> None:
        names = ", ".join(p.host.name for p in problems)
        super().__init__(_("{n} node(s) not ready: {names}").format(n=len(problems), names=names),
                         _("fix the problems above, then launch again"))
        self.problems = problems
        if all(p.usage for p in problems):
            self.code = UsageError.code


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    probes: tuple[Probe, ...]
    problems: tuple[NodeProblem, ...] = ()  # only a dry run gets here with problems
    agents: Agents | None = None  # keep_sessions: the sessions the run takes over (execute)


def assign_np(hosts: list[Host], np: int) -> list[Host]:
    """-np N with -H: fill hosts in order up to their slots (mpirun/horovodrun semantics);
    without slots, split N evenly."""
    if np < 1:
        raise UsageError(_('-np {np} must be at least 1').format(np=np), _('e.g. -np 8 -H node0:4,node1:4'))
    if all(h.slots is None for h in hosts):
        if np % len(hosts):
            raise UsageError(_('-np {np} does not split evenly over {n_hosts} hosts').format(np=np, n_hosts=len(hosts)),
                             _('give slots per host, e.g. -H node0:3,node1:2'))
        return [replace(h, slots=np // len(hosts)) for h in hosts]
    total = sum(h.slots or 1 for h in hosts)
    if np > total:
        raise UsageError(_('-np {np} exceeds the {total} slots of the hosts').format(np=np, total=total),
                         _('add slots (-H node0:4,...) or lower -np'))
    out, left = [], np
    for h in hosts:
        take = min(h.slots or 1, left)
        if take:
            out.append(replace(h, slots=take))
        left -= take
    return out


def prepare(hosts: list[Host], opts: LaunchOptions, ssh: SshOptions,
            environ: Mapping[str, str], *, preflight: bool = True, dry_run: bool = False,
            slots_for: Callable[[NodeFacts], int] | None = None,
            keep_sessions: bool = False) -> Prepared:
    """Probe every node (unless told not to), plan, and check that every node reaches the
    rendezvous port, all over one agent session per node. slots_for gives a host without
    slots its process count from what the probe found (the demo: one per GPU).
    keep_sessions: leave those sessions open in Prepared.agents for execute() to take over
    (one SSH login per node for the whole launch; the caller closes what is left)."""
    script = "" if opts.script.startswith("@TMP@") else opts.script
    kind = "exec" if opts.no_python else "module" if opts.module else "file"
    if not preflight:
        facts = [NodeFacts(local=h.name in LOCAL_NAMES, ssh_hostname=h.name, known=False)
                 for h in hosts]
        return Prepared(make_plan(_slotted(hosts, facts, slots_for), opts, environ, facts), ())
    local = local_flags(hosts)
    need = {"accelerate": ("accelerate",), "horovod": ("horovod",)}.get(opts.engine, ())
    if len(hosts) == 1 and local[0] and opts.python == sys.executable:
        probes = [probe_here(hosts[0], opts.workdir, script, kind, need)]  # no SSH
        prepared = _planned(hosts, probes, opts, environ, slots_for, dry_run)
        if _fixed_one_node_port(prepared.plan, opts) and not dry_run:
            _port_free_here(hosts[0], opts.port)
        return prepared
    agents = Agents(hosts, local, ssh, opts.python)
    try:
        probes = probe_with(agents, ssh, opts.python, opts.workdir, script, kind, need=need)
        prepared = _planned(hosts, probes, opts, environ, slots_for, dry_run)
        if (not prepared.plan.standalone or _fixed_one_node_port(prepared.plan, opts)) \
                and not dry_run:  # a dry run only looks; it holds no port
            check_rendezvous(agents, prepared.plan, [p.facts for p in probes])
    except BaseException:
        agents.close()
        raise
    if keep_sessions and not dry_run:
        return replace(prepared, agents=agents)
    agents.close()
    return prepared


def _planned(hosts, probes, opts, environ, slots_for, dry_run: bool) -> Prepared:
    """The plan from what the probes found. A dry run plans around nodes it could not reach
    (their addresses shown as unknown) and hands the problems back instead of raising."""
    problems = tuple(p.problem for p in probes if p.problem)
    if problems and not dry_run:
        raise PreflightError(list(problems))
    facts = [p.facts or NodeFacts(ssh_hostname=p.host.name, known=False, unreachable=True)
             for p in probes]
    plan = make_plan(_slotted(hosts, facts, slots_for), opts, environ, facts)
    return Prepared(plan, tuple(probes), problems)


def _fixed_one_node_port(plan: Plan, opts: LaunchOptions) -> bool:
    """A one-node run on the port the user chose (--port, MASTER_PORT), not a free one."""
    return plan.standalone and opts.fixed_port and opts.engine == "torchrun"


def _port_free_here(host: Host, port: int) -> None:
    """torchrun would join whatever already listens there (and wait 10 minutes): say so now."""
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            raise PreflightError([NodeProblem(
                host, "port", _('rendezvous port {port} (--port or MASTER_PORT) is not free: {strerror}').format(port=port, strerror=exc.strerror), _("find the owner: ss -ltnp 'sport = :{port}'; or use --port {port2}; without --port and MASTER_PORT a one-node run takes a free port").format(port=port, port2=port + 1))])\
                from None


def _slotted(hosts, facts, slots_for):
    if slots_for is None:
        return hosts
    return [h if h.slots else replace(h, slots=slots_for(f)) for h, f in zip(hosts, facts)]


def check_rendezvous(agents: Agents, plan: Plan, facts: list[NodeFacts]) -> None:
    """Every node dials the master's rendezvous port while a listener holds it: a run that
    would hang for 15 minutes is refused in seconds, with the reason."""
    from ddpkit.launch.netcheck import link_problems, probe_links

    hosts = [n.host for n in plan.nodes]
    report = probe_links(agents, [plan.master_addr] * len(hosts), plan.port, peers=False)
    problems = [NodeProblem(hosts[0], "port", _('rendezvous port {port} is not free: {why}').format(port=plan.port, why=why),
                            _("find the owner: ss -ltnp 'sport = :{port}' on {h}; or use --port {port2}").format(port=plan.port, h=h, port2=plan.port + 1)) for h, why in report.port_errors.items()]
    problems += [NodeProblem(Host(h), "link", why, _('check the node by hand'))
                 for h, why in report.session_errors.items()]
    subnet = next((str(a.network) for a in facts[0].addrs if a.ip == plan.master_addr), "")
    for p in link_problems(list(report.links), {}, subnet, plan.port):
        problems.append(NodeProblem(hosts[0], "link", p.message,
                                    _("{fix} ('ddpkit check' names the firewall and its command)").format(fix=p.fix)))
    if problems:
        raise PreflightError(problems)


def execute(plan: Plan, ssh: SshOptions, *, log_dir: str | None, grace: float,
            json_mode: bool, files: dict[str, str] | None = None, register=None,
            on_line=None, hide=None, heartbeat_timeout: float = 30.0,
            hang_timeout: float = 0.0, on_stall=None, agents: Agents | None = None) -> RunResult:
    width = max(len(f"{n.host.name}:{plan.world_size - 1}") for n in plan.nodes) + 1
    printer = Printer(sys.stdout, sys.stderr, width, Path(log_dir) if log_dir else None)
    sup = Supervisor(plan, ssh, printer, grace=grace, files=files, json_mode=json_mode,
                     on_line=on_line, hide=hide, heartbeat_timeout=heartbeat_timeout,
                     hang_timeout=hang_timeout, on_stall=on_stall, agents=agents)
    if register:
        register(sup)
    return sup.run()
