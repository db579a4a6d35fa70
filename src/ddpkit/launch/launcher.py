"""Launch as a library: hosts -> probe -> plan -> supervise. Used by `launch` and `demo`."""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from ddpkit.errors import EnvironmentFailure, UsageError
from ddpkit.launch.agents import Agents
from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import LaunchOptions, NodeFacts, Plan, make_plan
from ddpkit.launch.probe import LOCAL_NAMES, NodeProblem, Probe, local_flags, probe_here, probe_with
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.supervise import Printer, RunResult, Supervisor


class PreflightError(EnvironmentFailure):
    """One or more nodes cannot run the job; each problem names its node and fix."""

    def __init__(self, problems: list[NodeProblem]) -> None:
        names = ", ".join(p.host.name for p in problems)
        super().__init__(f"{len(problems)} node(s) not ready: {names}",
                         "fix the problems above, then launch again")
        self.problems = problems
        if all(p.usage for p in problems):
            self.code = UsageError.code


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    probes: tuple[Probe, ...]


def assign_np(hosts: list[Host], np: int) -> list[Host]:
    """-np N with -H: fill hosts in order up to their slots (mpirun/horovodrun semantics);
    without slots, split N evenly."""
    if np < 1:
        raise UsageError(f"-np {np} must be at least 1", "e.g. -np 8 -H node0:4,node1:4")
    if all(h.slots is None for h in hosts):
        if np % len(hosts):
            raise UsageError(f"-np {np} does not split evenly over {len(hosts)} hosts",
                             "give slots per host, e.g. -H node0:3,node1:2")
        return [replace(h, slots=np // len(hosts)) for h in hosts]
    total = sum(h.slots or 1 for h in hosts)
    if np > total:
        raise UsageError(f"-np {np} exceeds the {total} slots of the hosts",
                         "add slots (-H node0:4,...) or lower -np")
    out, left = [], np
    for h in hosts:
        take = min(h.slots or 1, left)
        if take:
            out.append(replace(h, slots=take))
        left -= take
    return out


def prepare(hosts: list[Host], opts: LaunchOptions, ssh: SshOptions,
            environ: Mapping[str, str], *, preflight: bool = True, dry_run: bool = False,
            slots_for: Callable[[NodeFacts], int] | None = None) -> Prepared:
    """Probe every node (unless told not to), plan, and check that every node reaches the
    rendezvous port, all over one agent session per node. slots_for gives a host without
    slots its process count from what the probe found (the demo: one per GPU)."""
    script = "" if opts.script.startswith("@TMP@") else opts.script
    if not preflight:
        facts = [NodeFacts(local=h.name in LOCAL_NAMES, ssh_hostname=h.name) for h in hosts]
        return Prepared(make_plan(_slotted(hosts, facts, slots_for), opts, environ, facts), ())
    local = local_flags(hosts)
    need = {"accelerate": ("accelerate",), "horovod": ("horovod",)}.get(opts.engine, ())
    if len(hosts) == 1 and local[0] and opts.python == sys.executable:
        probes = [probe_here(hosts[0], opts.workdir, script, opts.module, need)]  # no SSH
        _raise_problems(probes)
        facts = [p.facts or NodeFacts() for p in probes]
        return Prepared(make_plan(_slotted(hosts, facts, slots_for), opts, environ, facts),
                        tuple(probes))
    with Agents(hosts, local, ssh, opts.python) as agents:
        probes = probe_with(agents, ssh, opts.python, opts.workdir, script, opts.module,
                            need=need)
        _raise_problems(probes)
        facts = [p.facts or NodeFacts() for p in probes]
        plan = make_plan(_slotted(hosts, facts, slots_for), opts, environ, facts)
        if not plan.standalone and not dry_run:  # a dry run only looks; it holds no port
            check_rendezvous(agents, plan, facts)
    return Prepared(plan, tuple(probes))


def _slotted(hosts, facts, slots_for):
    if slots_for is None:
        return hosts
    return [h if h.slots else replace(h, slots=slots_for(f)) for h, f in zip(hosts, facts)]


def _raise_problems(probes: list[Probe]) -> None:
    problems = [p.problem for p in probes if p.problem]
    if problems:
        raise PreflightError(problems)


def check_rendezvous(agents: Agents, plan: Plan, facts: list[NodeFacts]) -> None:
    """Every node dials the master's rendezvous port while a listener holds it: a run that
    would hang for 15 minutes is refused in seconds, with the reason."""
    from ddpkit.launch.netcheck import link_problems, probe_links

    hosts = [n.host for n in plan.nodes]
    report = probe_links(agents, [plan.master_addr] * len(hosts), plan.port, peers=False)
    problems = [NodeProblem(hosts[0], "port", f"rendezvous port {plan.port} is not free: {why}",
                            f"find the owner: ss -ltnp 'sport = :{plan.port}' on {h}; or use "
                            f"--port {plan.port + 1}") for h, why in report.port_errors.items()]
    problems += [NodeProblem(Host(h), "link", why, "check the node by hand")
                 for h, why in report.session_errors.items()]
    subnet = next((str(a.network) for a in facts[0].addrs if a.ip == plan.master_addr), "")
    for p in link_problems(list(report.links), {}, subnet, plan.port):
        problems.append(NodeProblem(hosts[0], "link", p.message,
                                    p.fix + " ('ddpkit check' names the firewall and its command)"))
    if problems:
        raise PreflightError(problems)


def execute(plan: Plan, ssh: SshOptions, *, log_dir: str | None, grace: float,
            json_mode: bool, files: dict[str, str] | None = None, register=None,
            on_line=None, hide=None, heartbeat_timeout: float = 30.0) -> RunResult:
    width = max(len(f"{n.host.name}:{plan.world_size - 1}") for n in plan.nodes) + 1
    printer = Printer(sys.stdout, sys.stderr, width, Path(log_dir) if log_dir else None)
    sup = Supervisor(plan, ssh, printer, grace=grace, files=files, json_mode=json_mode,
                     on_line=on_line, hide=hide, heartbeat_timeout=heartbeat_timeout)
    if register:
        register(sup)
    return sup.run()
