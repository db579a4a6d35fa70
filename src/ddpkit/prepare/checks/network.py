"""Interfaces, what the hostname resolves to, MASTER_ADDR, MASTER_PORT and the firewall."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.parsers.firewall import (
    BLOCKED,
    UNKNOWN,
    judge_port,
    open_port_command,
    trust_subnet_command,
)
from ddpkit.parsers.ifaces import VIRTUAL_IFACE, is_loopback
from ddpkit.prepare.checks.base import CheckResult, Iface, Snapshot, Status


def routable(ifaces: tuple[Iface, ...]) -> list[Iface]:
    """Up interfaces with an IPv4 address that other nodes could use."""
    return [i for i in ifaces if i.up and i.ipv4 and not VIRTUAL_IFACE.match(i.name)
            and not all(is_loopback(a) for a in i.ipv4)]


def net_interfaces(s: Snapshot) -> CheckResult:
    good = routable(s.interfaces)
    listing = ", ".join(f"{i.name} {' '.join(i.ipv4)}" for i in s.interfaces if i.ipv4)
    if not good:
        return CheckResult("net.interfaces", Status.FAIL,
                           _("no usable IPv4 interface: other nodes cannot reach this one"),
                           detail=listing or _("no IPv4 addresses"),
                           hint=_("bring up the cluster network interface ({command} or your "
                                  "distribution's network tool)").format(
                               command="ip link set IFACE up; ip addr add ADDR/PREFIX dev IFACE"))
    virtual = [i.name for i in s.interfaces if i.up and i.ipv4 and VIRTUAL_IFACE.match(i.name)
               and i.name != "lo"]
    summary = ", ".join(f"{i.name} {i.ipv4[0]}" for i in good)
    pinned = s.env.get("NCCL_SOCKET_IFNAME") or s.env.get("GLOO_SOCKET_IFNAME")
    if virtual and len(good) >= 1 and not pinned:
        return CheckResult(
            "net.interfaces", Status.WARN,
            _("{interfaces}; also virtual: {virtual}").format(interfaces=summary,
                                                             virtual=", ".join(virtual)),
            detail=_("NCCL/Gloo may pick a bridge or virtual interface that other nodes cannot "
                     "reach"),
            hint=_("{command} (ddpkit launch sets these for you)").format(
                command=f"export NCCL_SOCKET_IFNAME={good[0].name} "
                        f"GLOO_SOCKET_IFNAME={good[0].name}"))
    return CheckResult("net.interfaces", Status.OK, summary, detail=listing)


def net_hostname(s: Snapshot) -> CheckResult:
    good = routable(s.interfaces)
    iface = good[0].name if good else "eth0"
    addr = good[0].ipv4[0].split("/")[0] if good else "THIS_NODE_IP"
    if s.hostname_error or not s.hostname_addrs:
        return CheckResult(
            "net.hostname", Status.WARN,
            _("hostname '{hostname}' does not resolve").format(hostname=s.hostname),
            detail=s.hostname_error,
            hint=_("add '{line}' to /etc/hosts on every node").format(line=f"{addr} {s.hostname}"))
    if all(is_loopback(a) for a in s.hostname_addrs):
        return CheckResult(
            "net.hostname", Status.WARN,
            _("hostname '{hostname}' resolves to {addrs} (loopback)").format(
                hostname=s.hostname, addrs=", ".join(s.hostname_addrs)),
            detail=_("torchrun's c10d rendezvous and Gloo publish this address, so other nodes "
                     "dial themselves: fine on one machine, a hang or 'Connection refused' on "
                     "several"),
            hint=_("map the hostname to the cluster address in /etc/hosts ('{line}', above any "
                   "127.0.1.1 line), or {command} (ddpkit launch does this for you)").format(
                line=f"{addr} {s.hostname}",
                command=f"export GLOO_SOCKET_IFNAME={iface} NCCL_SOCKET_IFNAME={iface}"))
    return CheckResult("net.hostname", Status.OK,
                       _("hostname '{hostname}' resolves to {addrs}").format(
                           hostname=s.hostname, addrs=", ".join(s.hostname_addrs)))


def net_master_addr(s: Snapshot) -> CheckResult:
    addr = s.env.get("MASTER_ADDR")
    if not addr:
        return CheckResult("net.master_addr", Status.SKIP, _("MASTER_ADDR is not set"),
                           detail=_("ddpkit launch picks the first host's cluster address"))
    if s.master_addr_error or not s.master_addr_resolved:
        return CheckResult("net.master_addr", Status.FAIL,
                           _("{setting} does not resolve").format(setting=f"MASTER_ADDR={addr}"),
                           detail=s.master_addr_error,
                           hint=_("set MASTER_ADDR to the master node's cluster IP address"))
    multi = int(s.env.get("NNODES", "1") or 1) > 1
    if all(is_loopback(a) for a in s.master_addr_resolved):
        status = Status.FAIL if multi else Status.WARN
        return CheckResult("net.master_addr", status,
                           _("{setting} is a loopback address").format(
                               setting=f"MASTER_ADDR={addr}"),
                           detail=_("other nodes cannot reach it; fine for a single-machine run"),
                           hint=_("set MASTER_ADDR to the master node's cluster IP (not "
                                  "127.0.0.1)"))
    return CheckResult("net.master_addr", Status.OK,
                       _('MASTER_ADDR={addr} -> {master_addr_resolved}').format(addr=addr, master_addr_resolved=', '.join(s.master_addr_resolved)))


def port_free(s: Snapshot) -> CheckResult:
    port = s.master_port
    if s.port_bind_error == "in use":
        return CheckResult(
            "port.master", Status.WARN, _('port {port} is already in use on this machine').format(port=port),
            detail=_("another job or a leftover process holds it; a multi-node run mastered here fails with 'address already in use' (a one-node ddpkit launch picks a free port unless one is given)"),
            hint=_("find the owner: ss -ltnp 'sport = :{port}'; or pick another port: export MASTER_PORT={port2} (ddpkit launch, demo, bench and check take it as their --port), or ddpkit launch --port {port2}").format(port=port, port2=port + 1))
    if s.port_bind_error.startswith("MASTER_PORT="):
        return CheckResult("port.master", Status.FAIL, s.port_bind_error,
                           hint=_('export MASTER_PORT=29500 (a number from 1 to 65535)'))
    if s.port_bind_error:
        return CheckResult("port.master", Status.WARN, _('cannot bind port {port}: {port_bind_error}').format(port=port, port_bind_error=s.port_bind_error),
                           hint=_('pick another port: export MASTER_PORT={port}, or ddpkit launch --port {port}').format(port=port + 1))
    return CheckResult("port.master", Status.OK, _("port {port} is free").format(port=port))


def port_firewall(s: Snapshot) -> CheckResult:
    port = s.master_port
    if not port:
        return CheckResult("port.firewall", Status.SKIP, _("no valid MASTER_PORT to check"))
    verdict = judge_port(s.firewall, port)
    if verdict.firewall == "none" and s.firewall_unreadable:
        return CheckResult("port.firewall", Status.SKIP, _("cannot read the firewall rules"),
                           detail=s.firewall_unreadable,
                           hint=_("run '{command}' to include them").format(
                               command="sudo ddpkit doctor"))
    subnet = _subnet(s)
    if verdict.state == BLOCKED:
        what = _("silently dropped (peers hang until a timeout)") if verdict.action == "DROP" \
            else _("rejected (peers see 'connection refused')")
        return CheckResult(
            "port.firewall", Status.FAIL,
            _("{firewall} blocks incoming TCP {port}: {what}").format(
                firewall=verdict.firewall, port=port, what=what),
            detail=verdict.detail,
            hint=_("{open_port}; NCCL and Gloo also connect on random ports between all nodes, so "
                   "better trust the cluster subnet: {trust_subnet}").format(
                open_port=open_port_command(verdict.firewall, port),
                trust_subnet=trust_subnet_command(verdict.firewall, subnet)))
    if verdict.state == UNKNOWN:
        return CheckResult("port.firewall", Status.WARN,
                           _("{firewall} may block TCP {port}").format(firewall=verdict.firewall,
                                                                      port=port),
                           detail=verdict.detail,
                           hint=trust_subnet_command(verdict.firewall, subnet))
    return CheckResult("port.firewall", Status.OK,
                       _("firewall lets TCP {port} in").format(port=port),
                       detail=f"{verdict.firewall}: {verdict.detail}")


def _subnet(s: Snapshot) -> str:
    import ipaddress

    good = routable(s.interfaces)
    if not good:
        return "CLUSTER_SUBNET/24"
    return str(ipaddress.ip_interface(good[0].ipv4[0]).network)
