"""Real TCP connections between the nodes: every node listens, every node dials.

torchrun cannot tell a refused port from a dropped one (both end in the same timeout after
15 minutes); a connect() can, in milliseconds or in `timeout` seconds. One session per node
answers through its agent (nodeside/agent.py): listen -> (all listening) -> dial -> report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ddpkit.i18n import N_, _
from ddpkit.launch.agents import Agents
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import Reply, describe_ssh_failure
from ddpkit.parsers.firewall import open_port_command, trust_subnet_command


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
    targets: list[list[dict]] = [[] for _unused in hosts]
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
    if not reply.stderr.strip():
        return _("link probe failed: exit {code}").format(code=reply.returncode)
    return _("link probe failed: {last}").format(last=reply.stderr.strip().splitlines()[-1])


FAIL, WARN = "fail", "warn"


@dataclass(frozen=True)
class Problem:
    severity: str  # fail | warn
    kind: str  # ssh | python | torch | doctor | mismatch | link | port | hostname | ddpkit
    where: str
    message: str
    fix: str

    def to_dict(self) -> dict:
        return {"severity": self.severity, "kind": self.kind, "where": self.where,
                "message": self.message, "fix": self.fix}


def _fw(nodes: Mapping[str, Any], host: str) -> str:
    fw = nodes[host].facts.get("firewall", "") if host in nodes else ""
    return fw if fw and fw != "none" else "iptables"


# One whole message per link state (translated where shown; N_ marks them for the catalog),
# so a translation need not splice the English state word into its own sentence.
_BLOCKED = {
    "filtered": N_("{srcs} cannot reach {dst} on {what}: filtered, dropped: a firewall on {dst} "
                   "drops it"),
    "refused": N_("{srcs} cannot reach {dst} on {what}: refused, refused although a listener "
                  "was up: a firewall on {dst} rejects it"),
    "no_route": N_("{srcs} cannot reach {dst} on {what}: no_route, no route to {dst} at {ip}"),
    "error": N_("{srcs} cannot reach {dst} on {what}: error, connect failed on {dst} at {ip}"),
}
_PAIR = {
    "filtered": N_("{a} and {b} cannot reach each other (peer traffic filtered) although both "
                   "reach the master: a firewall on {a} or {b} blocks the other"),
    "refused": N_("{a} and {b} cannot reach each other (peer traffic refused) although both "
                  "reach the master: a firewall on {a} or {b} blocks the other"),
    "no_route": N_("{a} and {b} cannot reach each other (peer traffic no_route) although both "
                   "reach the master: a firewall on {a} or {b} blocks the other"),
    "error": N_("{a} and {b} cannot reach each other (peer traffic error) although both reach "
                "the master: a firewall on {a} or {b} blocks the other"),
}
_WAIT = {"rendezvous": N_(" (plain torchrun would wait ~15 min, then fail)"),
         "peer": N_(" (Gloo/NCCL would hang until their timeout, 30 min by default)")}


def link_problems(links: list[Link], nodes: Mapping[str, Any], subnet: str,
                  port: int) -> list[Problem]:
    """nodes: host -> anything with a .facts dict (its "firewall" picks the fix's command).
    One problem per blocked destination port; peer links blocked both ways between two
    nodes are one problem, since either node's firewall may be the one that drops them."""
    bad: dict[tuple[str, str, int], list[Link]] = {}
    for link in links:
        if link.state != "ok":
            bad.setdefault((link.dst, link.kind, link.port), []).append(link)
    failed_pairs = {(link.src, link.dst) for group in bad.values() for link in group
                    if link.kind == "peer"}
    trusted = subnet or "CLUSTER_SUBNET"
    out, done_pairs = [], set()
    for (dst, kind, p), group in sorted(bad.items()):
        first = group[0]
        if kind == "peer" and len(group) == 1 and (dst, first.src) in failed_pairs:
            pair = tuple(sorted((dst, first.src)))
            if pair in done_pairs:
                continue
            done_pairs.add(pair)
            a, b = pair
            out.append(Problem(
                FAIL, "link", f"{a} <-> {b}",
                _(_PAIR.get(first.state, _PAIR["error"])).format(a=a, b=b) + _(_WAIT["peer"]),
                _('on {a}: {trust_subnet_command}; on {b}: {trust_subnet_command2}').format(a=a, trust_subnet_command=trust_subnet_command(_fw(nodes, a), trusted), b=b, trust_subnet_command2=trust_subnet_command(_fw(nodes, b), trusted))))
            continue
        srcs = ", ".join(sorted(link.src for link in group))
        fw = _fw(nodes, dst)
        if first.state == "no_route":
            fix = _('give {dst} an address on the network the nodes share, or fix the routes').format(dst=dst)
        elif kind == "rendezvous":
            fix = (_('on {dst}: {open_port_command}; better, trust the cluster subnet: {trust_subnet_command}').format(dst=dst, open_port_command=open_port_command(fw, p), trust_subnet_command=trust_subnet_command(fw, trusted)))
        else:
            fix = _('on {dst}: {trust_subnet_command} (NCCL and Gloo connect on random ports between all nodes)').format(dst=dst, trust_subnet_command=trust_subnet_command(fw, trusted))
        what = _('the rendezvous port {p}').format(p=p) if kind == "rendezvous" else _('port {p} (peer traffic)').format(p=p)
        wait = _(_WAIT[kind]) if first.state in ("filtered", "no_route") else ""
        out.append(Problem(FAIL, "link", f"{srcs} -> {dst}:{p}",
                           _(_BLOCKED.get(first.state, _BLOCKED["error"])).format(
                               srcs=srcs, dst=dst, what=what, ip=first.ip) + wait,
                           fix))
    return out
