"""Where is every rank stuck? Pure judging of the stacks launch/stackdump.py took.

Ranks whose main thread stands at the same place fold into one group ("ranks 0-2, 4-7:
all_reduce at train.py:88"); the odd ones out are named with what they did instead ("rank 3:
evaluate() at train.py:120, never reached the all_reduce"). A hang in a collective always
has this shape: the ranks that arrived wait for the ones that did not, so the rank that is
*not* waiting (or waits in another collective: a desync) is the straggler.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from ddpkit.i18n import _, ngettext
from ddpkit.launch.stackdump import NodeStacks, ProcStack

# Python-level names of torch.distributed calls that block until every rank arrives
# (torch/distributed/distributed_c10d.py, torch 2.x).
COLLECTIVES = frozenset("""all_reduce all_gather all_gather_into_tensor all_gather_object
all_to_all all_to_all_single barrier monitored_barrier broadcast broadcast_object_list
gather gather_object reduce reduce_scatter reduce_scatter_tensor scatter scatter_object_list
send recv batch_isend_irecv all_reduce_coalesced wait""".split())
INIT = frozenset({"init_process_group", "new_group", "_store_based_barrier", "init_device_mesh",
                  "_new_process_group_helper", "rendezvous"})
WAITING = ("collective", "init", "rendezvous")
LIB = re.compile(r"/(site|dist)-packages/|/lib/python\d+\.\d+/|^<frozen ")


@dataclass(frozen=True)
class Place:
    kind: str  # collective | init | rendezvous | user | unknown
    op: str  # all_reduce, init_process_group, rendezvous, or the function's name
    file: str = ""  # where in the user's code (innermost frame outside libraries)
    line: int = 0
    func: str = ""
    inner: str = ""  # the innermost frame when it is in a library (DataLoader.__next__, ...)

    @property
    def text(self) -> str:
        if self.kind == "rendezvous":
            return _("torchrun's rendezvous (no workers started)")
        if self.kind == "unknown":
            return _("no Python stack")
        if self.kind in ("collective", "init"):
            name, inner = self.op, ""
        else:
            name = f"{self.func}()" if self.func and self.func != "<module>" else _("module code")
            inner = self.inner
        # one message per shape, so a translation places "at" and "in" itself
        if self.file:
            text = (_("{name} at {file}:{line} (in {inner})") if inner
                    else _("{name} at {file}:{line}"))
        else:
            text = _("{name} (in {inner})") if inner else "{name}"
        return text.format(name=name, file=self.file, line=self.line, inner=inner)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "op": self.op, "file": self.file, "line": self.line,
                "func": self.func, "text": self.text}


@dataclass(frozen=True)
class Group:
    place: Place
    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    odd: bool = False
    note: str = ""  # for an odd one out: what it failed to do

    @property
    def label(self) -> str:
        return ranks_label(self.ranks)

    def to_dict(self) -> dict:
        return {"ranks": list(self.ranks), "hosts": list(self.hosts), "odd": self.odd,
                "note": self.note, "place": self.place.to_dict()}


@dataclass(frozen=True)
class Problem:
    where: str  # host:rank or host
    message: str
    fix: str

    def to_dict(self) -> dict:
        return {"where": self.where, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class StackReport:
    groups: tuple[Group, ...] = ()
    verdict: str = ""  # one line: who is behind and where everyone waits
    stragglers: tuple[str, ...] = ()  # "rank 3 (node1)", "node2"
    missing_ranks: tuple[int, ...] = ()
    rendezvous: str = ""  # a rendezvous that never completed: which nodes never joined
    problems: tuple[Problem, ...] = ()
    nodes: tuple[NodeStacks, ...] = field(default=(), compare=False)
    evidence: tuple[str, ...] = ()  # the flight recorder's lines (troubleshoot/flight.py)

    def to_dict(self) -> dict:
        return {"schema": 1, "verdict": self.verdict, "stragglers": list(self.stragglers),
                "missing_ranks": list(self.missing_ranks), "rendezvous": self.rendezvous,
                "groups": [g.to_dict() for g in self.groups],
                "problems": [p.to_dict() for p in self.problems],
                "evidence": list(self.evidence),
                "nodes": [n.to_dict() for n in self.nodes]}

    def lines(self) -> list[str]:
        out = []
        for g in self.groups:
            label = f"{ranks_word(g.ranks)} ({', '.join(g.hosts)})" if g.ranks \
                else ", ".join(g.hosts)
            mark = "!" if g.odd else " "
            note = f", {g.note}" if g.note else ""
            out.append(f"{mark} {label}: {g.place.text}{note}")
        if self.missing_ranks:
            out.append("! " + _("{ranks}: no process found").format(
                ranks=ranks_word(self.missing_ranks)))
        if self.rendezvous and self.rendezvous != self.verdict:
            out.append(f"! {self.rendezvous}")
        for p in self.problems:
            out.append("  " + _("cannot read {where}: {message}").format(where=p.where,
                                                                       message=p.message))
            out.append("    " + _("fix: {text}").format(text=p.fix))
        out.extend(f"! {line}" for line in self.evidence)
        if self.verdict:
            out.append(self.verdict)
        return out


def ranks_label(ranks) -> str:
    """(0, 1, 2, 4, 5, 6, 7) -> '0-2, 4-7'."""
    out, run = [], []
    for r in sorted(ranks):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [r]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ", ".join(out)


def ranks_word(ranks) -> str:
    return ngettext("rank {ranks}", "ranks {ranks}", len(ranks)).format(ranks=ranks_label(ranks))


def main_thread(proc: ProcStack) -> list[dict]:
    threads = list(proc.threads)
    for t in threads:
        if t.get("os_thread_id") == proc.pid or t.get("thread_name") == "MainThread":
            return list(t.get("frames", []))
    return list(threads[0].get("frames", [])) if threads else []


def _short(frame: dict) -> str:
    return frame.get("short_filename") or frame.get("filename", "").rsplit("/", 1)[-1]


def place_of(proc: ProcStack) -> Place:
    """Frames come innermost first. The collective is the outermost torch.distributed frame
    with a known name (the call the user made, not the wrappers inside it); the user's place
    is the innermost frame outside libraries."""
    frames = main_thread(proc)
    if not frames:
        return Place("unknown", "")
    user = next((f for f in frames if not LIB.search(f.get("filename", ""))), None)
    ufile, uline, ufunc = (_short(user), int(user.get("line", 0)), user.get("name", "")) \
        if user else ("", 0, "")
    if proc.role == "agent":
        if any("rendezvous" in f.get("name", "") or "/elastic/rendezvous/" in f.get("filename", "")
               for f in frames):
            return Place("rendezvous", "rendezvous")
        return Place("user", frames[0].get("name", ""), _short(frames[0]),
                     int(frames[0].get("line", 0)), frames[0].get("name", ""))
    for f in reversed(frames):
        if "torch/distributed/" not in f.get("filename", ""):
            continue
        name = f.get("name", "").rsplit(".", 1)[-1]
        if name in INIT:
            return Place("init", "init_process_group", ufile, uline, ufunc)
        if name in COLLECTIVES:
            return Place("collective", name, ufile, uline, ufunc)
    if any(f.get("name") == "backward" or f.get("name", "").endswith("._engine_run_backward")
           for f in frames):
        return Place("collective", _("backward (DDP's gradient all_reduce)"), ufile, uline,
                     ufunc)
    inner = "" if frames[0] is user else f"{frames[0].get('name', '')}, {_short(frames[0])}"
    return Place("user", ufunc, ufile, uline, ufunc, inner)


def busy(nodes: list[NodeStacks]) -> tuple[str, ...]:
    """Processes that are computing, not waiting: a main thread on the CPU outside any
    collective (py-spy's "active"), or torchrun still starting (no workers, no rendezvous).
    A silent run with such a rank is loading data or compiling, not hung."""
    return tuple(text for text, _unused in _busy(nodes))


def busy_fingerprint(nodes: list[NodeStacks]) -> tuple[str, ...]:
    """The whole stacks of the busy processes: two looks that return the same are one rank
    spinning in place (a CUDA synchronize), not progress. (The innermost frame alone is not
    enough: every import spends its time in the same frozen function.)"""
    return tuple(key for _unused, key in _busy(nodes))


def _busy(nodes: list[NodeStacks]) -> list[tuple[str, str]]:
    out = []
    for n in nodes:
        workers = any(p.role == "worker" for p in n.procs)
        for p in n.procs:
            place = place_of(p)
            if place.kind in WAITING:
                continue
            active = any(t.get("active") for t in p.threads
                         if t.get("os_thread_id") == p.pid or t.get("thread_name") == "MainThread")
            frames = main_thread(p)
            key = f"{n.host}:{p.pid}:" + "|".join(
                f"{f.get('name')}@{f.get('filename')}:{f.get('line')}" for f in frames)
            # an import reading files from a cold disk is off the CPU (py-spy: idle) and still
            # progress; one stuck in place shows the same stack twice and is named then
            importing = any(str(f.get("filename", "")).startswith("<frozen importlib")
                            for f in frames)
            if p.role == "worker" and (active or importing):
                out.append((f"rank {p.rank} ({n.host}): {place.text}", key))
            elif p.role == "agent" and not workers:
                out.append((_("{host}: torchrun starting ({text})").format(
                    host=n.host, text=place.text), key))
    return out


def judge(nodes: list[NodeStacks], world_size: int | None = None,
          hosts: list[str] | None = None) -> StackReport:
    """Group the ranks by place and name who is behind. world_size and hosts, when known
    (a launch), let ranks and nodes that have no process be named too."""
    problems = tuple(_problems(nodes))
    workers = [p for n in nodes for p in n.procs if p.role == "worker"]
    agents = [p for n in nodes for p in n.procs if p.role == "agent"]
    readable = [p for p in workers if p.threads and p.rank is not None]
    groups = _groups(readable)
    world = world_size or max((p.world_size or 0 for p in workers), default=0)
    seen = {p.rank for p in workers}
    missing = tuple(r for r in range(world) if r not in seen) if workers else ()
    rdzv = _rendezvous(nodes, agents, hosts)
    if rdzv[0]:
        groups += [Group(place_of(a), (), (a.host,)) for a in agents if a.threads]
    groups, stragglers, verdict = _verdict(groups, missing, nodes)
    if rdzv[0]:
        stragglers, verdict = rdzv[1], rdzv[0]
    return StackReport(tuple(groups), verdict, tuple(stragglers), missing, rdzv[0], problems,
                       tuple(nodes))


def _groups(procs: list[ProcStack]) -> list[Group]:
    by_place: dict[Place, list[ProcStack]] = defaultdict(list)
    for p in procs:
        by_place[place_of(p)].append(p)
    groups = [Group(pl, tuple(sorted(p.rank for p in ps)),  # type: ignore[misc]
                    tuple(sorted({p.host for p in ps}))) for pl, ps in by_place.items()]
    return sorted(groups, key=lambda g: (-len(g.ranks), g.ranks))


def _verdict(groups: list[Group], missing: tuple[int, ...], nodes) -> tuple[list, list, str]:
    if not groups:
        return groups, [], _("no rank of this run found") if not missing else \
            _("{ranks}: no process found").format(ranks=ranks_word(missing))
    waiting = [g for g in groups if g.place.kind in WAITING]
    others = [g for g in groups if g.place.kind not in WAITING]
    crowd = waiting[0] if waiting else groups[0]
    if waiting and others:
        odd = others
        notes = {id(g): _("never reached the {op}").format(op=crowd.place.op) for g in odd}
    elif len(groups) > 1:
        odd = groups[1:]
        notes = {id(g): _("while the others wait in {text}: the ranks call different "
                          "collectives (a desync: one skipped or added a collective)").format(
                              text=crowd.place.text) for g in odd}
    else:
        odd, notes = [], {}
    marked = [Group(g.place, g.ranks, g.hosts, True, notes[id(g)]) if id(g) in notes else g
              for g in groups]
    stragglers = [f"{ranks_word(g.ranks)} ({', '.join(g.hosts)})" for g in odd]
    if missing:
        stragglers.append(_("{ranks} (no process found)").format(ranks=ranks_word(missing)))
    if stragglers:
        one = len(crowd.ranks) == 1
        # one message per verb form, so a translation need not build the sentence from words
        if crowd.place.kind in WAITING:
            message = _("straggler: {stragglers}; {ranks} waits in {text}") if one else \
                _("straggler: {stragglers}; {ranks} wait in {text}")
        else:
            message = _("straggler: {stragglers}; {ranks} is in {text}") if one else \
                _("straggler: {stragglers}; {ranks} are in {text}")
        verdict = message.format(stragglers="; ".join(stragglers), ranks=ranks_word(crowd.ranks),
                                 text=crowd.place.text)
    elif crowd.place.kind in WAITING:
        verdict = (_('every rank waits in {text}; none is behind (a peer outside this run, or a collective that never completes)').format(text=crowd.place.text))
    else:
        verdict = (_('every rank is in {text}, outside any collective: no rank waits for another').format(text=crowd.place.text))
    return marked, stragglers, verdict


def _rendezvous(nodes, agents, hosts) -> tuple[str, list[str]]:
    """A rendezvous that never completed: torchrun waits on some nodes, no workers anywhere."""
    in_rdzv = sorted({a.host for a in agents if place_of(a).kind == "rendezvous"})
    if not in_rdzv or any(p.role == "worker" for n in nodes for p in n.procs):
        return "", []
    known = hosts or [n.host for n in nodes]
    never = [h for h in known if h not in in_rdzv]
    want = next((a.nnodes for a in agents if a.nnodes), "")
    need = int(want.split(":")[-1]) if want.split(":")[-1].isdigit() else 0
    text = _("rendezvous incomplete: {hosts} wait(s) for the other nodes").format(
        hosts=", ".join(in_rdzv))
    if never:
        text += _("; never joined: {hosts}").format(hosts=", ".join(never))
    if need and need > len(known):
        text += _("; torchrun --nnodes {want} but only {n} node(s) run it: a wrong --nnodes, "
                  "or nodes missing from the host list").format(want=want, n=len(known))
    # stragglers: the hosts that never joined, else a --nnodes the hosts cannot meet; none
    # when every node joined and the count is met (a rendezvous still completing)
    return text, never or ([f"--nnodes {want}"] if need > len(known) else [])


def _problems(nodes: list[NodeStacks]):
    for n in nodes:
        if n.error:
            yield Problem(n.host, n.error, _("check the node by hand ('{command}')").format(
                command="ddpkit check -H ..."))
        if not n.procs and n.unreadable and n.ptrace.get("uid") != 0:
            # every machine has processes a user cannot look into; it matters only when
            # nothing of the job was found there
            yield Problem(n.host, _("{n} process(es) of other users could not be looked "
                                    "into").format(n=n.unreadable),
                          _("if the job runs as another user, run ddpkit stacks as that user or "
                            "as root (sudo)"))
        for p in n.procs:
            if p.error:
                where = f"{n.host}:{p.rank}" if p.rank is not None else f"{n.host} (torchrun)"
                yield Problem(where, p.error, attach_fix(p.error, n.ptrace))


def attach_fix(error: str, ptrace: dict) -> str:
    """Why py-spy could not attach, and how to allow it."""
    if re.search(r"no py-spy", error):
        return _("pip install py-spy here (ddpkit sends its binary to nodes that lack it)")
    if re.search(r"No such process|process .* (exited|not found)", error, re.I):
        return _("the process ended while its stack was taken; run the command again")
    if not re.search(r"permission denied|operation not permitted|EPERM|ptrace", error, re.I):
        return _("run 'py-spy dump --pid PID' on the node to see py-spy's own message")
    scope = ptrace.get("ptrace_scope")
    if scope and ptrace.get("uid") != 0:
        return _("kernel.yama.ptrace_scope is {scope}: only root may attach; run as root "
                 "(sudo) or allow it: {command}").format(
            scope=scope, command="sudo sysctl -w kernel.yama.ptrace_scope=0")
    if ptrace.get("container") and not ptrace.get("cap_sys_ptrace"):
        return _("the container lacks SYS_PTRACE: start it with `docker run --cap-add "
                 "SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE]), or "
                 "run as root")
    return _("run ddpkit stacks as the job's user or as root (sudo); check "
             "kernel.yama.ptrace_scope and, in a container, SYS_PTRACE")
