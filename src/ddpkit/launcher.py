"""Launch as a library: hosts -> probe -> plan -> supervise. Used by `launch` and `demo`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Mapping

from ddpkit.errors import EnvironmentFailure, UsageError
from ddpkit.hosts import Host
from ddpkit.plan import LaunchOptions, NodeFacts, Plan, make_plan
from ddpkit.probe import LOCAL_NAMES, NodeProblem, Probe, probe_nodes
from ddpkit.remote import SshOptions
from ddpkit.supervise import Printer, RunResult, Supervisor


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
            environ: Mapping[str, str], *, preflight: bool = True,
            slots_for: Callable[[NodeFacts], int] | None = None) -> Prepared:
    """Probe every node (unless told not to), then plan. slots_for gives a host without
    slots its process count from what the probe found (the demo: one per GPU)."""
    if preflight:
        script = "" if opts.script.startswith("@TMP@") else opts.script
        probes = probe_nodes(hosts, ssh, opts.python, opts.workdir, script, opts.module)
        problems = [p.problem for p in probes if p.problem]
        if problems:
            raise PreflightError(problems)
        facts = [p.facts or NodeFacts() for p in probes]
    else:
        probes = ()
        facts = [NodeFacts(local=h.name in LOCAL_NAMES, ssh_hostname=h.name) for h in hosts]
    if slots_for is not None:
        hosts = [h if h.slots else replace(h, slots=slots_for(f)) for h, f in zip(hosts, facts)]
    plan = make_plan(hosts, opts, environ, facts)
    return Prepared(plan, tuple(probes))


def execute(plan: Plan, ssh: SshOptions, *, log_dir: str | None, grace: float,
            json_mode: bool, files: dict[str, str] | None = None, register=None,
            on_line=None, hide=None) -> RunResult:
    import sys

    width = max(len(f"{n.host.name}:{plan.world_size - 1}") for n in plan.nodes) + 1
    printer = Printer(sys.stdout, sys.stderr, width, Path(log_dir) if log_dir else None)
    sup = Supervisor(plan, ssh, printer, grace=grace, files=files, json_mode=json_mode,
                     on_line=on_line, hide=hide)
    if register:
        register(sup)
    return sup.run()
