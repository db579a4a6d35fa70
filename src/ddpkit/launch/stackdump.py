"""Take the Python stack of every rank on every node at once: one agent session per node runs
nodeside/stackdump.py, which finds the run's workers and calls `py-spy dump` on all of them in
parallel. A node without py-spy gets this machine's binary over the same session."""

from __future__ import annotations

import base64
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpkit.i18n import _
from ddpkit.launch.agents import Agents
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions, describe_ssh_failure
from ddpkit.nodeside import source


@dataclass(frozen=True)
class ProcStack:
    host: str
    pid: int
    role: str  # worker | agent (torchrun itself, when it has no workers: a rendezvous wait)
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    run_id: str = ""
    nnodes: str = ""  # agents: torchrun's --nnodes
    threads: tuple = ()  # py-spy's JSON, one dict per thread, innermost frame first
    error: str = ""  # why py-spy could not read it

    def to_dict(self) -> dict:
        return {"host": self.host, "pid": self.pid, "role": self.role, "rank": self.rank,
                "local_rank": self.local_rank, "world_size": self.world_size,
                "run_id": self.run_id, "nnodes": self.nnodes, "error": self.error,
                "threads": [_slim(t) for t in self.threads]}


@dataclass(frozen=True)
class NodeStacks:
    host: str
    procs: tuple[ProcStack, ...] = ()
    error: str = ""  # the node could not be asked (SSH, no interpreter)
    ptrace: dict = field(default_factory=dict)  # ptrace_scope, cap_sys_ptrace, uid, container
    unreadable: int = 0  # processes of other users we could not look into
    watch: dict = field(default_factory=dict)  # --hang-timeout: progress + flight recorder

    def to_dict(self) -> dict:
        return {"host": self.host, "error": self.error, "ptrace": self.ptrace,
                "unreadable": self.unreadable, "procs": [p.to_dict() for p in self.procs]}

    @classmethod
    def from_dict(cls, d: dict) -> NodeStacks:
        """Back from to_dict() (a run record's stacks.json, test fixtures)."""
        procs = tuple(ProcStack(**{**p, "threads": tuple(p.get("threads", ()))})
                      for p in d.get("procs", []))
        return cls(d["host"], procs, d.get("error", ""), d.get("ptrace", {}),
                   int(d.get("unreadable", 0)))


def _slim(thread: dict) -> dict:
    frames = [{"name": f.get("name", "?"), "filename": f.get("filename", ""),
               "short_filename": f.get("short_filename", ""), "line": f.get("line", 0)}
              for f in thread.get("frames", [])]
    return {"thread_id": thread.get("thread_id"), "os_thread_id": thread.get("os_thread_id"),
            "thread_name": thread.get("thread_name"), "active": thread.get("active"),
            "frames": frames}


def local_pyspy() -> str:
    """This machine's py-spy (the `py-spy` dependency installs it next to the interpreter)."""
    for path in (Path(sys.executable).parent / "py-spy", shutil.which("py-spy")):
        if path and Path(path).is_file():
            return str(path)
    return ""


def dist_version(name: str) -> str:
    """An installed package's version, without importing it ("" when not installed)."""
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return ""


def pyspy_version() -> str:
    return dist_version("py-spy")  # "": not installed as a package; any cached copy will do


def take_stacks(hosts: list[Host], local: list[bool], ssh: SshOptions, python: str,
                run_id: str = "", timeout: float = 20.0,
                watch: dict | None = None) -> list[NodeStacks]:
    """Every node's stacks, asked in parallel; nodes that lack py-spy get it sent, then a
    second round asks only them. `watch` (launch --hang-timeout) also brings back each rank's
    progress and flight recorder (nodeside/stackdump.py, gather); the second round does not
    ask for them again."""
    version = pyspy_version()
    request = {"run_id": run_id, "pyspy_version": version, "timeout": 10}
    msg = {"op": "probe", "source": source("stackdump"),
           "args": [{**request, "watch": watch} if watch else request]}
    with Agents(hosts, local, ssh, python) as agents:
        replies = agents.ask([msg for _unused in hosts], timeout)
        missing = [i for i, r in enumerate(replies) if r and r.get("probe", {}).get("missing_pyspy")]
        binary = local_pyspy()
        if missing and binary:
            data = base64.b64encode(Path(binary).read_bytes()).decode()
            again = {"op": "probe", "source": msg["source"],
                     "args": [{**request, "pyspy_b64": data}]}
            second = agents.ask([again if i in missing else None for i in range(len(hosts))],
                                timeout + 10)
            replies = [_keep_watch(second[i], r) if i in missing else r
                       for i, r in enumerate(replies)]
        return [_node(h, r, agents.ended[i]) for i, (h, r) in enumerate(zip(hosts, replies))]


def _keep_watch(second: dict | None, first: dict | None) -> dict | None:
    """The second round's stacks with the first round's progress and dumps."""
    watched = (first or {}).get("probe", {}).get("watch")
    if second is None or not watched or "probe" not in second:
        return second
    return {**second, "probe": {**second["probe"], "watch": watched}}


def _node(host: Host, reply: dict | None, ended) -> NodeStacks:
    if reply is None:
        said = ended.stderr if ended is not None else ""
        why = describe_ssh_failure(said, host).message if said else _('no answer')
        return NodeStacks(host.name, error=_("cannot reach {host}: {why}").format(host=host.name,
                                                                                   why=why))
    got = reply.get("probe")
    if got is None:
        return NodeStacks(host.name, error=f"{host.name}: {reply.get('error') or _('agent error')}")
    missing = "no py-spy on the node, and none here to send" if got.get("missing_pyspy") else ""
    procs = tuple(ProcStack(
        host=host.name, pid=int(p["pid"]), role=p.get("role", "worker"), rank=p.get("rank"),
        local_rank=p.get("local_rank"), world_size=p.get("world_size"),
        run_id=p.get("run_id", ""), nnodes=p.get("nnodes", ""),
        threads=tuple(p.get("threads", ())), error=p.get("error", "") or missing)
        for p in got.get("procs", []))
    return NodeStacks(host.name, procs, error=got.get("error", ""), ptrace=got.get("ptrace", {}),
                      unreadable=int(got.get("unreadable", 0)), watch=got.get("watch") or {})


def timed_take(*args, **kwargs) -> tuple[list[NodeStacks], float]:
    t0 = time.monotonic()
    nodes = take_stacks(*args, **kwargs)
    return nodes, time.monotonic() - t0
