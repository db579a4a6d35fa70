"""Real TCP connections between the nodes: every node listens, every node dials.

torchrun cannot tell a refused port from a dropped one (both end in the same timeout after
15 minutes); a connect() can, in milliseconds or in `timeout` seconds. One session per node
answers through its agent (nodeside/agent.py): listen -> (all listening) -> dial -> report.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpkit.agents import Agents
from ddpkit.hosts import Host
from ddpkit.remote import Reply, describe_ssh_failure


@dataclass(frozen=True)
class Link:
    src: str
    dst: str
    ip: str
    port: int
    kind: str  # "rendezvous" (the master's port) or "peer" (an ephemeral port, as NCCL/Gloo use)
    state: str  # ok | refused | filtered | no_route | error
    error: str = ""
    ms: float = 0.0

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "port": self.port, "state": self.state,
                "kind": self.kind, "ip": self.ip, "error": self.error, "ms": self.ms}


@dataclass(frozen=True)
class LinkReport:
    links: tuple[Link, ...]
    port_errors: dict[str, str]  # host -> why it could not listen on the rendezvous port
    session_errors: dict[str, str]  # host -> why its probe session failed


def probe_links(agents: Agents, addrs: list[str], port: int, *, peers: bool,
                timeout: float = 3.0) -> LinkReport:
    """Node 0 listens on `port`; with peers=True every node also listens on a free port. Then
    every node dials every other node's ports at once. Nodes whose agent is gone are skipped."""
    hosts = agents.hosts
    n = len(hosts)
    wanted = [([port] if i == 0 else []) + ([0] if peers else []) for i in range(n)]
    listening = agents.ask([{"op": "listen", "ports": w} if w else None for w in wanted], 30)
    port_errors: dict[str, str] = {}
    targets: list[list[dict]] = [[] for _ in hosts]
    for j in range(n):
        for info in (listening[j] or {}).get("listening", []):
            if info["error"]:
                if info["want"] == port:
                    port_errors[hosts[j].name] = info["error"]
                continue
            kind = "rendezvous" if (j == 0 and info["want"] == port) else "peer"
            for i in range(n):
                if i != j and agents.alive(i):
                    targets[i].append({"dst": hosts[j].name, "ip": addrs[j], "port": info["port"],
                                       "kind": kind})
    replies = agents.ask([{"op": "dial", "targets": t, "timeout": timeout} if t else None
                          for t in targets], timeout + 30)
    links = []
    for i, got in enumerate(replies):
        for raw in (got or {}).get("links", []):
            links.append(Link(src=hosts[i].name, dst=raw["dst"], ip=raw["ip"], port=int(raw["port"]),
                              kind=raw.get("kind", "peer"), state=raw["state"],
                              error=raw.get("error", ""), ms=float(raw.get("ms", 0))))
    errors = {hosts[i].name: _why(agents.ended[i], hosts[i]) for i in range(n)
              if agents.ended[i] is not None and (wanted[i] or targets[i])}
    return LinkReport(tuple(links), port_errors, errors)


def _why(reply: Reply, host: Host) -> str:
    if reply.returncode == 255:
        return describe_ssh_failure(reply.stderr, host).message
    last = reply.stderr.strip().splitlines()[-1] if reply.stderr.strip() else f"exit {reply.returncode}"
    return f"link probe failed: {last}"
