"""Firewall verdicts for a TCP port, as table tests over the front-ends' own output formats."""

import pytest

from ddpkit.parsers.firewall import (
    BLOCKED,
    OPEN,
    firewalld_verdict,
    iptables_verdict,
    judge_port,
    open_port_command,
    ufw_verdict,
)

IPT_DROP_29500 = """-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-A INPUT -p tcp -m tcp --dport 29500 -j DROP
"""
IPT_REJECT = """-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-A INPUT -p tcp -m tcp --dport 29500 -j REJECT --reject-with icmp-port-unreachable
"""
IPT_POLICY_DROP = """-P INPUT DROP
-P FORWARD DROP
-P OUTPUT ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
"""
IPT_POLICY_DROP_RANGE_OPEN = IPT_POLICY_DROP + "-A INPUT -p tcp -m multiport --dports 80,29400:29600 -j ACCEPT\n"
IPT_USER_CHAIN = """-P INPUT ACCEPT
-P FORWARD ACCEPT
-P OUTPUT ACCEPT
-N INPUT_direct
-N IN_public
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -j INPUT_direct
-A INPUT -j IN_public
-A INPUT -j REJECT --reject-with icmp-host-prohibited
-A IN_public -p tcp -m tcp --dport 22 -m conntrack --ctstate NEW -j ACCEPT
"""
IPT_SOURCE_ONLY = IPT_POLICY_DROP + "-A INPUT -s 10.0.0.0/24 -j ACCEPT\n"
IPT_DROP_FROM_ONE_HOST = "-P INPUT ACCEPT\n-A INPUT -s 10.9.9.9/32 -p tcp --dport 29500 -j DROP\n"
IPT_LOOPBACK_ONLY_DROP = "-P INPUT ACCEPT\n-A INPUT -i lo -p tcp --dport 29500 -j DROP\n"


@pytest.mark.parametrize("rules, state, action", [
    (IPT_DROP_29500, BLOCKED, "DROP"),
    (IPT_REJECT, BLOCKED, "REJECT"),
    (IPT_POLICY_DROP, BLOCKED, "DROP"),
    (IPT_POLICY_DROP_RANGE_OPEN, OPEN, ""),
    (IPT_USER_CHAIN, BLOCKED, "REJECT"),
    (IPT_SOURCE_ONLY, OPEN, ""),
    (IPT_DROP_FROM_ONE_HOST, OPEN, ""),
    (IPT_LOOPBACK_ONLY_DROP, OPEN, ""),
])
def test_iptables_verdict(rules, state, action):
    v = iptables_verdict(rules, 29500)
    assert v is not None and v.state == state
    assert v.action == action


def test_iptables_names_the_rule():
    v = iptables_verdict(IPT_DROP_29500, 29500)
    assert "--dport 29500" in v.detail and "drops" in v.detail


def test_iptables_other_port_unaffected():
    assert iptables_verdict(IPT_DROP_29500, 29501).state == OPEN


def test_iptables_empty_accept_table_defers():
    assert iptables_verdict("-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n", 29500) is None


UFW_ACTIVE = """Status: active
Logging: on (low)
Default: deny (incoming), allow (outgoing), disabled (routed)
New profiles: skip

To                         Action      From
--                         ------      ----
22/tcp                     ALLOW IN    Anywhere
29400:29600/tcp            ALLOW IN    Anywhere
22/tcp (v6)                ALLOW IN    Anywhere (v6)
"""


@pytest.mark.parametrize("text, port, state", [
    (UFW_ACTIVE, 29500, OPEN),
    (UFW_ACTIVE, 12345, BLOCKED),
    ("Status: active\n\nTo    Action    From\n--    ------    ----\n22/tcp    ALLOW    Anywhere\n", 29500, BLOCKED),
    ("Status: active\n\nTo                 Action      From\n--                 ------      ----\n"
     "Anywhere           ALLOW       10.0.0.0/24\n", 29500, OPEN),
])
def test_ufw_verdict(text, port, state):
    assert ufw_verdict(text, port).state == state


def test_ufw_inactive_defers():
    assert ufw_verdict("Status: inactive\n", 29500) is None


FWD_DEFAULT = """public (active)
  target: default
  icmp-block-inversion: no
  interfaces: eth0
  sources: 
  services: cockpit dhcpv6-client ssh
  ports: 
  protocols: 
  forward: yes
  masquerade: no
  forward-ports: 
  source-ports: 
  icmp-blocks: 
  rich rules: 
"""
FWD_OPEN = FWD_DEFAULT.replace("  ports: \n", "  ports: 29500/tcp 8000-8100/tcp\n")
FWD_RICH = FWD_DEFAULT.replace("  rich rules: \n",
                               '  rich rules: \n\trule family="ipv4" source address="10.0.0.0/24" accept\n')


@pytest.mark.parametrize("listing, port, state", [
    (FWD_DEFAULT, 29500, BLOCKED),
    (FWD_OPEN, 29500, OPEN),
    (FWD_OPEN, 8050, OPEN),
    (FWD_RICH, 29500, OPEN),
    (FWD_DEFAULT.replace("target: default", "target: ACCEPT"), 29500, OPEN),
])
def test_firewalld_verdict(listing, port, state):
    assert firewalld_verdict("running", listing, port).state == state


def test_firewalld_not_running_defers():
    assert firewalld_verdict("not running", FWD_DEFAULT, 29500) is None


def test_precedence_firewalld_over_iptables():
    v = judge_port({"firewalld_state": "running", "firewalld_list": FWD_OPEN,
                    "iptables": IPT_DROP_29500}, 29500)
    assert v.firewall == "firewalld" and v.state == OPEN


def test_no_firewall_is_open():
    assert judge_port({}, 29500).firewall == "none"


@pytest.mark.parametrize("fw, expect", [
    ("firewalld", "firewall-cmd --permanent --add-port=29500/tcp"),
    ("ufw", "ufw allow 29500/tcp"),
    ("iptables", "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"),
])
def test_open_port_command(fw, expect):
    assert expect in open_port_command(fw, 29500)
