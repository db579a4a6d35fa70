"""Interfaces, what the hostname resolves to, MASTER_ADDR, MASTER_PORT and the firewall."""

from __future__ import annotations

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
                           "no usable IPv4 interface: other nodes cannot reach this one",
                           detail=listing or "no IPv4 addresses",
                           hint="bring up the cluster network interface (ip link set IFACE up; "
                                "ip addr add ADDR/PREFIX dev IFACE or your distribution's network tool)")
    virtual = [i.name for i in s.interfaces if i.up and i.ipv4 and VIRTUAL_IFACE.match(i.name)
               and i.name != "lo"]
    summary = ", ".join(f"{i.name} {i.ipv4[0]}" for i in good)
    pinned = s.env.get("NCCL_SOCKET_IFNAME") or s.env.get("GLOO_SOCKET_IFNAME")
    if virtual and len(good) >= 1 and not pinned:
        return CheckResult(
            "net.interfaces", Status.WARN, f"{summary}; also virtual: {', '.join(virtual)}",
            detail="NCCL/Gloo may pick a bridge or virtual interface that other nodes cannot reach",
            hint=f"export NCCL_SOCKET_IFNAME={good[0].name} GLOO_SOCKET_IFNAME={good[0].name} "
                 "(ddpkit launch sets these for you)")
    return CheckResult("net.interfaces", Status.OK, summary, detail=listing)


def net_hostname(s: Snapshot) -> CheckResult:
    good = routable(s.interfaces)
    iface = good[0].name if good else "eth0"
    addr = good[0].ipv4[0].split("/")[0] if good else "THIS_NODE_IP"
    if s.hostname_error or not s.hostname_addrs:
        return CheckResult(
            "net.hostname", Status.WARN, f"hostname '{s.hostname}' does not resolve",
            detail=s.hostname_error,
            hint=f"add '{addr} {s.hostname}' to /etc/hosts on every node")
    if all(is_loopback(a) for a in s.hostname_addrs):
        return CheckResult(
            "net.hostname", Status.WARN,
            f"hostname '{s.hostname}' resolves to {', '.join(s.hostname_addrs)} (loopback)",
            detail="torchrun's c10d rendezvous and Gloo publish this address, so other nodes dial "
                   "themselves: fine on one machine, a hang or 'Connection refused' on several",
            hint=f"map the hostname to the cluster address in /etc/hosts ('{addr} {s.hostname}', "
                 f"above any 127.0.1.1 line), or export GLOO_SOCKET_IFNAME={iface} "
                 f"NCCL_SOCKET_IFNAME={iface} (ddpkit launch does this for you)")
    return CheckResult("net.hostname", Status.OK,
                       f"hostname '{s.hostname}' resolves to {', '.join(s.hostname_addrs)}")


def net_master_addr(s: Snapshot) -> CheckResult:
    addr = s.env.get("MASTER_ADDR")
    if not addr:
        return CheckResult("net.master_addr", Status.SKIP, "MASTER_ADDR is not set",
                           detail="ddpkit launch picks the first host's cluster address")
    if s.master_addr_error or not s.master_addr_resolved:
        return CheckResult("net.master_addr", Status.FAIL, f"MASTER_ADDR={addr} does not resolve",
                           detail=s.master_addr_error,
                           hint="set MASTER_ADDR to the master node's cluster IP address")
    multi = int(s.env.get("NNODES", "1") or 1) > 1
    if all(is_loopback(a) for a in s.master_addr_resolved):
        status = Status.FAIL if multi else Status.WARN
        return CheckResult("net.master_addr", status, f"MASTER_ADDR={addr} is a loopback address",
                           detail="other nodes cannot reach it; fine for a single-machine run",
                           hint="set MASTER_ADDR to the master node's cluster IP (not 127.0.0.1)")
    return CheckResult("net.master_addr", Status.OK,
                       f"MASTER_ADDR={addr} -> {', '.join(s.master_addr_resolved)}")


def port_free(s: Snapshot) -> CheckResult:
    port = s.master_port
    if s.port_bind_error == "in use":
        return CheckResult(
            "port.master", Status.WARN, f"port {port} is already in use on this machine",
            detail="another job or a leftover process holds it; a run mastered here fails with "
                   "'address already in use'",
            hint=f"find the owner: ss -ltnp 'sport = :{port}'; or pick another port "
                 f"(ddpkit launch --port {port + 1}, or MASTER_PORT={port + 1})")
    if s.port_bind_error.startswith("MASTER_PORT="):
        return CheckResult("port.master", Status.FAIL, s.port_bind_error,
                           hint="export MASTER_PORT=29500 (a number from 1 to 65535)")
    if s.port_bind_error:
        return CheckResult("port.master", Status.WARN, f"cannot bind port {port}: {s.port_bind_error}",
                           hint=f"pick another port: MASTER_PORT={port + 1}")
    return CheckResult("port.master", Status.OK, f"port {port} is free")


def port_firewall(s: Snapshot) -> CheckResult:
    port = s.master_port
    if not port:
        return CheckResult("port.firewall", Status.SKIP, "no valid MASTER_PORT to check")
    verdict = judge_port(s.firewall, port)
    if verdict.firewall == "none" and s.firewall_unreadable:
        return CheckResult("port.firewall", Status.SKIP, "cannot read the firewall rules",
                           detail=s.firewall_unreadable, hint="run 'sudo ddpkit doctor' to include them")
    subnet = _subnet(s)
    if verdict.state == BLOCKED:
        what = "silently dropped (peers hang until a timeout)" if verdict.action == "DROP" \
            else "rejected (peers see 'connection refused')"
        return CheckResult(
            "port.firewall", Status.FAIL,
            f"{verdict.firewall} blocks incoming TCP {port}: {what}",
            detail=verdict.detail,
            hint=f"{open_port_command(verdict.firewall, port)}; NCCL and Gloo also connect on "
                 f"random ports between all nodes, so better trust the cluster subnet: "
                 f"{trust_subnet_command(verdict.firewall, subnet)}")
    if verdict.state == UNKNOWN:
        return CheckResult("port.firewall", Status.WARN, f"{verdict.firewall} may block TCP {port}",
                           detail=verdict.detail,
                           hint=trust_subnet_command(verdict.firewall, subnet))
    return CheckResult("port.firewall", Status.OK, f"firewall lets TCP {port} in",
                       detail=f"{verdict.firewall}: {verdict.detail}")


def _subnet(s: Snapshot) -> str:
    import ipaddress

    good = routable(s.interfaces)
    if not good:
        return "CLUSTER_SUBNET/24"
    return str(ipaddress.ip_interface(good[0].ipv4[0]).network)
