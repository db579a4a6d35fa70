"""`ddpkit setup firewall`: the smallest firewall change per node that lets a run work.

What a run needs: the rendezvous port open on the first node, and every node reachable from
the others on the random ports NCCL and Gloo listen on (trusting the cluster subnet covers
them). Each node is read over SSH (one round trip: which front-end is active, its rules, which
persistence files it has), judged with the parsers the doctor uses, and planned: the commands
for that firewall, then its way of keeping them across a reboot. Planning is pure; `apply`
runs the plan as root or with `sudo -n`.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field

from ddpkit.errors import EnvironmentFailure
from ddpkit.i18n import _
from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import Addr, NodeFacts, choose_network
from ddpkit.launch.remote import SshOptions, describe_ssh_failure, ssh_run_all, ssh_settings
from ddpkit.parsers.firewall import (
    BLOCKED,
    firewalld_verdict,
    iptables_verdict,
    open_port_command,
    parse_iptables_s,
    trust_subnet_command,
    ufw_verdict,
)
from ddpkit.parsers.nftables import chain_verdict, parse_chains, trusts

# A port in Linux's default ephemeral range (32768-60999), where NCCL and Gloo listen.
PEER_SAMPLE_PORT = 45000

FACTS_SCRIPT = r"""PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin"
S=""; [ "$(id -u)" = 0 ] || S="sudo -n"
sec() { echo "@@ddpkit $1"; }
has() { command -v "$1" >/dev/null 2>&1; }
sec access; if [ -z "$S" ]; then echo root; elif sudo -n true 2>/dev/null; then echo sudo; else echo none; fi
sec firewalld_state; has firewall-cmd && $S firewall-cmd --state 2>&1
sec firewalld_list; has firewall-cmd && $S firewall-cmd --list-all 2>&1
sec firewalld_trusted; has firewall-cmd && $S firewall-cmd --permanent --zone=trusted --list-sources 2>&1
sec ufw; has ufw && $S ufw status verbose 2>&1
sec iptables; has iptables && $S iptables -S 2>&1
sec nft; has nft && $S nft list ruleset 2>&1
sec addrs; ip -o -4 addr show 2>/dev/null
sec persist
for f in /etc/iptables/rules.v4 /etc/sysconfig/iptables /etc/nftables.conf /etc/sysconfig/nftables.conf; do
  [ -f "$f" ] && echo "$f"
done
has netfilter-persistent && echo netfilter-persistent
true
"""


@dataclass(frozen=True)
class NodeFw:
    """What one node's firewall looks like (the raw outputs, as the doctor reads them)."""
    host: Host
    access: str  # root | sudo | none
    outputs: dict[str, str]
    addrs: tuple[Addr, ...] = ()
    persist: tuple[str, ...] = ()
    error: str = ""  # why the node could not be read
    fix: str = ""


@dataclass(frozen=True)
class Step:
    why: str
    command: str  # as root would type it; run through `sh -c` on the node

    def shown(self, sudo: bool) -> str:
        return f"sudo sh -c {shlex.quote(self.command)}" if sudo and ">" in self.command \
            else (f"sudo {self.command}" if sudo else self.command)


@dataclass(frozen=True)
class NodePlan:
    host: str
    firewall: str  # what is active: firewalld | ufw | iptables | nftables | iptables+nftables | none
    steps: tuple[Step, ...] = ()
    persist: tuple[Step, ...] = ()
    notes: tuple[str, ...] = ()
    access: str = "root"
    error: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        sudo = self.access == "sudo"
        return {"host": self.host, "firewall": self.firewall, "access": self.access,
                "commands": [s.shown(sudo) for s in self.steps + self.persist],
                "why": [s.why for s in self.steps + self.persist], "notes": list(self.notes),
                "error": self.error, "fix": self.fix}


@dataclass(frozen=True)
class FirewallPlan:
    port: int
    subnet: str
    nodes: tuple[NodePlan, ...]
    applied: dict[str, str] = field(default_factory=dict)  # host -> "" or why it failed

    @property
    def changes_needed(self) -> bool:
        return any(n.steps for n in self.nodes)

    def to_dict(self) -> dict:
        return {"schema": 1, "port": self.port, "subnet": self.subnet,
                "changes_needed": self.changes_needed, "applied": self.applied,
                "nodes": [n.to_dict() for n in self.nodes]}


# ---- pure -----------------------------------------------------------------------------------

def split_sections(stdout: str) -> dict[str, str]:
    out: dict[str, list[str]] = {}
    key = ""
    for line in stdout.splitlines():
        if line.startswith("@@ddpkit "):
            key = line.split(" ", 1)[1].strip()
            out[key] = []
        elif key:
            out[key].append(line)
    return {k: "\n".join(v) + ("\n" if v else "") for k, v in out.items()}


def node_from_output(host: Host, stdout: str) -> NodeFw:
    import re

    sec = split_sections(stdout)
    addrs = tuple(Addr(i, c) for i, c in re.findall(
        r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\d+\.\d+\.\d+\.\d+/\d+)", sec.get("addrs", ""), re.M))
    return NodeFw(host, (sec.get("access", "").strip() or "none"), sec, addrs,
                  tuple(sec.get("persist", "").split()))


def cluster_subnet(nodes: list[NodeFw], ssh_hostnames: list[str]) -> str:
    facts = [NodeFacts(hostname=n.host.name, addrs=n.addrs, ssh_hostname=h)
             for n, h in zip(nodes, ssh_hostnames)]
    master, _unused, _unused2 = choose_network(facts)
    if not master:
        return ""
    return str(next(a.network for a in nodes[0].addrs if a.ip == master))


def plan_node(node: NodeFw, *, master: bool, port: int, subnet: str,
              stop: bool = False) -> NodePlan:
    if node.error:
        return NodePlan(node.host.name, "unknown", error=node.error, fix=node.fix)
    o = node.outputs
    base = NodePlan(node.host.name, "none", access=node.access)
    if o.get("firewalld_state", "").strip() == "running":
        plan = _firewalld(node, master, port, subnet)
    elif ufw_verdict(o.get("ufw", ""), port) is not None:
        plan = _ufw(node, master, port, subnet)
    else:
        plan = _netfilter(node, master, port, subnet)
    plan = NodePlan(base.host, plan.firewall, plan.steps, plan.persist, plan.notes, node.access)
    if stop and plan.firewall != "none":
        plan = _stop(plan)
    if plan.steps and node.access == "none":
        plan = NodePlan(plan.host, plan.firewall, plan.steps, plan.persist, plan.notes,
                        node.access, error=_("changing the firewall needs root, and sudo asks "
                                             "for a password here"),
                        fix=_("run the commands above on {host} as root, or log in as root "
                              "(ssh config User root), or allow passwordless sudo for them").format(
                                  host=plan.host))
    return plan


def _cmd(text: str) -> str:
    return text.replace("sudo ", "")


def _firewalld(node: NodeFw, master: bool, port: int, subnet: str) -> NodePlan:
    o = node.outputs
    steps = []
    trusted = subnet in o.get("firewalld_trusted", "").split()
    if not trusted:
        peer = firewalld_verdict("running", o.get("firewalld_list", ""), PEER_SAMPLE_PORT)
        if peer is not None and peer.state == BLOCKED:
            steps.append(Step(_("trust the cluster subnet {subnet} (NCCL/Gloo random ports)").format(subnet=subnet),
                              _cmd(trust_subnet_command("firewalld", subnet))))
    rdzv = firewalld_verdict("running", o.get("firewalld_list", ""), port)
    # trusting the subnet covers the rendezvous port too: open it alone only when needed
    if master and not trusted and not steps and rdzv is not None and rdzv.state == BLOCKED:
        steps.insert(0, Step(_("open the rendezvous port {port}/tcp").format(port=port),
                             _cmd(open_port_command("firewalld", port))))
    return NodePlan(node.host.name, "firewalld", tuple(steps),
                    notes=(_("firewalld keeps --permanent rules across reboots"),) if steps
                    else ())


def _covers(source: str, subnet: str) -> bool:
    try:
        return ipaddress.ip_network(subnet, strict=False).subnet_of(
            ipaddress.ip_network(source.strip(), strict=False))
    except (ValueError, TypeError):
        return False


def _ufw_rows(status: str, subnet: str) -> tuple[str, bool]:
    """(status without the rules that admit only sources outside the cluster subnet, whether
    a rule admits everything from it). The doctor's verdict counts any source-limited ALLOW
    as open; here only sources that hold the cluster count."""
    import re

    kept, trusted = [], False
    for line in status.splitlines():
        cols = re.split(r"\s{2,}", line.strip())
        if len(cols) >= 3 and cols[1].upper().startswith(("ALLOW", "LIMIT")) \
                and not cols[2].startswith("Anywhere"):
            if not _covers(cols[2].split()[0], subnet):
                continue
            trusted = trusted or cols[0] == "Anywhere"
        kept.append(line)
    return "\n".join(kept) + "\n", trusted


def _ufw(node: NodeFw, master: bool, port: int, subnet: str) -> NodePlan:
    status, trusted = _ufw_rows(node.outputs.get("ufw", ""), subnet)
    steps = []
    peer = ufw_verdict(status, PEER_SAMPLE_PORT)
    if not trusted and peer is not None and peer.state == BLOCKED:
        steps.append(Step(_("trust the cluster subnet {subnet} (NCCL/Gloo random ports)").format(subnet=subnet),
                          _cmd(trust_subnet_command("ufw", subnet))))
    rdzv = ufw_verdict(status, port)
    # trusting the subnet covers the rendezvous port too: open it alone only when needed
    if master and not trusted and not steps and rdzv is not None and rdzv.state == BLOCKED:
        steps.insert(0, Step(_("open the rendezvous port {port}/tcp").format(port=port),
                             _cmd(open_port_command("ufw", port))))
    return NodePlan(node.host.name, "ufw", tuple(steps),
                    notes=(_("ufw keeps its rules across reboots"),) if steps else ())


def _iptables_for_cluster(rules: str, subnet: str) -> str:
    """`iptables -S` without ACCEPT rules limited to sources outside the cluster subnet (the
    doctor's verdict counts those as open for everyone)."""
    import re

    out = []
    for line in rules.splitlines():
        m = re.search(r"(?:^|\s)-s\s+(\S+)", line)
        if m and line.rstrip().endswith("-j ACCEPT") and not _covers(m.group(1), subnet):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _iptables_trusts(rules: str, subnet: str) -> bool:
    _unused, chains = parse_iptables_s(rules)
    for rule in chains.get("INPUT", []):
        if rule[:2] == ["-s", subnet] and rule[-2:] == ["-j", "ACCEPT"] and len(rule) == 4:
            return True
    return False


def _netfilter(node: NodeFw, master: bool, port: int, subnet: str) -> NodePlan:
    o = node.outputs
    steps: list[Step] = []
    persist: list[Step] = []
    notes: list[str] = []
    active = []
    ipt = _iptables_for_cluster(o.get("iptables", ""), subnet)
    peer = iptables_verdict(ipt, PEER_SAMPLE_PORT)
    rdzv = iptables_verdict(ipt, port)
    if peer is not None or rdzv is not None:
        active.append("iptables")
        trusted = _iptables_trusts(ipt, subnet)
        if not trusted and peer is not None and peer.state == BLOCKED:
            steps.append(Step(_("trust the cluster subnet {subnet} (NCCL/Gloo random ports)").format(subnet=subnet),
                              f"iptables -I INPUT -s {subnet} -j ACCEPT"))
        if master and rdzv is not None and rdzv.state == BLOCKED and not (
                trusted or steps):
            steps.insert(0, Step(_("open the rendezvous port {port}/tcp").format(port=port),
                                 f"iptables -I INPUT -p tcp --dport {port} -j ACCEPT"))
        if steps:
            persist += _persist_iptables(node.persist, notes)
    chains = [c for c in parse_chains(o.get("nft", "")) if c.hook == "input"
              and not c.iptables_managed and c.family in ("inet", "ip")]
    nft_steps = []
    for c in chains:
        if trusts(c, subnet):
            continue
        verdicts = [chain_verdict(c, PEER_SAMPLE_PORT, subnet)[0]]
        if master:
            verdicts.append(chain_verdict(c, port, subnet)[0])
        if any(v != "accept" for v in verdicts):
            nft_steps.append(Step(_("trust the cluster subnet {subnet} in nftables chain "
                                    "{chain}").format(subnet=subnet,
                                                      chain=f"{c.family} {c.table} {c.name}"),
                                  "nft insert rule " + shlex.join([c.family, c.table, c.name])
                                  + f" ip saddr {subnet} accept"))
    if chains:
        active.append("nftables")
    if nft_steps:
        steps += nft_steps
        persist += _persist_nft(node.persist, notes)
    return NodePlan(node.host.name, "+".join(active) or "none", tuple(steps), tuple(persist),
                    tuple(notes))


def _persist_iptables(files: tuple[str, ...], notes: list[str]) -> list[Step]:
    for path in ("/etc/iptables/rules.v4", "/etc/sysconfig/iptables"):
        if path in files:
            return [Step(_("keep the rules across reboots ({path})").format(path=path),
                         f"iptables-save > {path}")]
    if "netfilter-persistent" in files:
        return [Step(_("keep the rules across reboots"), "netfilter-persistent save")]
    notes.append(_("iptables rules are lost at reboot: no rules file here; install "
                   "iptables-persistent (Debian/Ubuntu) or iptables-services (RHEL) and run this "
                   "again"))
    return []


def _persist_nft(files: tuple[str, ...], notes: list[str]) -> list[Step]:
    for path in ("/etc/nftables.conf", "/etc/sysconfig/nftables.conf"):
        if path in files:
            # the file is loaded with `nft -f`: start from a clean ruleset, as Debian's does
            return [Step(_("keep the rules across reboots ({path})").format(path=path),
                         f"{{ echo '#!/usr/sbin/nft -f'; echo 'flush ruleset'; "
                         f"nft -s list ruleset; }} > {path}")]
    notes.append(_("nftables rules are lost at reboot: no /etc/nftables.conf here; save them "
                   "with nft list ruleset into the file your nftables service loads"))
    return []


def _stop(plan: NodePlan) -> NodePlan:
    cmds = {"firewalld": ["systemctl disable --now firewalld"], "ufw": ["ufw disable"],
            "iptables": ["iptables -P INPUT ACCEPT", "iptables -F INPUT"],
            "nftables": ["nft flush ruleset"]}
    steps = [Step(_("stop the firewall (--stop-firewall)"), c)
             for fw in plan.firewall.split("+") for c in cmds.get(fw, [])]
    return NodePlan(plan.host, plan.firewall, tuple(steps), (), plan.notes + (
        _("the firewall is off: every port of this node is open to every network it is on"),),
        plan.access)


def make_plan(nodes: list[NodeFw], ssh_hostnames: list[str], port: int,
              stop: bool = False) -> FirewallPlan:
    readable = [n for n in nodes if not n.error]
    subnet = cluster_subnet(readable, ssh_hostnames) if readable and readable[0] is nodes[0] \
        else ""
    if not subnet and readable:
        addr = nodes[0].addrs[0] if nodes[0].addrs else None
        subnet = str(ipaddress.ip_interface(addr.cidr).network) if addr else "CLUSTER_SUBNET"
    plans = [plan_node(n, master=(i == 0), port=port, subnet=subnet, stop=stop)
             for i, n in enumerate(nodes)]
    return FirewallPlan(port, subnet, tuple(plans))


def apply_script(plan: NodePlan) -> list[str]:
    """One `sh -c` for the node: every step in order, stop at the first failure."""
    prefix = "sudo -n " if plan.access == "sudo" else ""
    lines = ['PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin"', "set -e"]
    for step in plan.steps + plan.persist:
        lines.append(f"echo {shlex.quote('+ ' + step.command)}")
        lines.append(f"{prefix}sh -c {shlex.quote(step.command)}")
    return ["sh", "-c", "\n".join(lines)]


# ---- acting ---------------------------------------------------------------------------------

def read_nodes(hosts: list[Host], ssh: SshOptions) -> tuple[list[NodeFw], list[str]]:
    replies = ssh_run_all(hosts, ssh, [["sh", "-c", FACTS_SCRIPT]] * len(hosts),
                          ssh.connect_timeout + 30)
    nodes = []
    for host, reply in zip(hosts, replies):
        if reply.returncode != 0:
            fail = describe_ssh_failure(reply.stderr, host)
            nodes.append(NodeFw(host, "none", {}, error=fail.message, fix=fail.fix))
        else:
            nodes.append(node_from_output(host, reply.stdout))
    names = [ssh_settings(h, ssh).get("hostname", h.name) for h in hosts]
    return nodes, names


def plan_firewall(hosts: list[Host], ssh: SshOptions, port: int,
                  stop: bool = False) -> FirewallPlan:
    nodes, names = read_nodes(hosts, ssh)
    return make_plan(nodes, names, port, stop)


def apply_plan(hosts: list[Host], ssh: SshOptions, plan: FirewallPlan) -> dict[str, str]:
    """Run each node's steps; host -> "" (done) or why it failed."""
    todo = [(h, p) for h, p in zip(hosts, plan.nodes) if p.steps and not p.error]
    if any(p.error for p in plan.nodes):
        bad = next(p for p in plan.nodes if p.error)
        raise EnvironmentFailure(f"{bad.host}: {bad.error}", bad.fix)
    replies = ssh_run_all([h for h, _p in todo], ssh, [apply_script(p) for _h, p in todo],
                          ssh.connect_timeout + 60)
    out = {}
    for (host, _p), reply in zip(todo, replies):
        said = (reply.stdout + reply.stderr).strip().splitlines()
        out[host.name] = "" if reply.returncode == 0 else (said[-1] if said else
                                                          f"exit {reply.returncode}")
    return out
