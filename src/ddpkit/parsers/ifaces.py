"""Names of network interfaces and addresses, shared by the doctor, the launch plan and check."""

from __future__ import annotations

import ipaddress
import re

# Interfaces a run between machines never goes over: loopback, container and VM bridges,
# tunnels, overlay networks. A rendezvous or NCCL_SOCKET_IFNAME on one of them hangs peers.
VIRTUAL_IFACE = re.compile(
    r"^(lo|docker\d*|virbr\d*|veth|br-|cni|flannel|cali|tun|tap|vxlan|kube|vnet|ifb)")


def is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(addr.split("/")[0]).is_loopback
    except ValueError:
        return addr in ("localhost",)
