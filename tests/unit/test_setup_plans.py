"""`ddpkit setup ssh|firewall|torch`: the pure parts, as tables. Firewall outputs are the
recorded ones in tests/fixtures/firewall (sources in tests/fixtures/SOURCES.md)."""

from __future__ import annotations

import pytest

from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import Addr
from ddpkit.parsers.nftables import chain_verdict, parse_chains, trusts
from ddpkit.prepare.setup import firewall as fw
from ddpkit.prepare.setup import ssh
from ddpkit.prepare.setup import torch as st
from tests.conftest import FIXTURES

FW = FIXTURES / "firewall"
SUBNET = "10.20.0.0/24"
IPT_OPEN = "-P INPUT ACCEPT\n-P FORWARD ACCEPT\n-P OUTPUT ACCEPT\n"


def node(name="node0", access="root", persist=(), **outputs) -> fw.NodeFw:
    return fw.NodeFw(Host(name), access, {"iptables": IPT_OPEN, **outputs},
                     (Addr("eth0", "10.20.0.5/24"),), tuple(persist))


def fixture(name: str) -> str:
    return (FW / name).read_text()


def commands(plan: fw.NodePlan) -> list[str]:
    return [s.command for s in plan.steps + plan.persist]


# ---- firewall -------------------------------------------------------------------------------

@pytest.mark.parametrize("master", [True, False])
def test_firewalld_public_zone_gets_the_subnet_trusted(master):
    n = node(firewalld_state="running\n",
             firewalld_list=fixture("firewall-cmd-list-all-public-active.txt"))
    plan = fw.plan_node(n, master=master, port=29500, subnet=SUBNET)
    assert plan.firewall == "firewalld"
    # trusting the subnet covers the rendezvous port too: one change, persistent by itself
    assert commands(plan) == [f"firewall-cmd --permanent --zone=trusted --add-source={SUBNET} "
                              "&& firewall-cmd --reload"]


@pytest.mark.parametrize("listing, trusted, changes", [
    ("firewall-cmd-list-all-public-active.txt", f"{SUBNET}\n", 0),  # done before: idempotent
    ("firewall-cmd-list-all-trusted.txt", "", 0),  # target ACCEPT lets everything in
    ("firewall-cmd-list-all-ports.txt", "192.168.9.0/24\n", 1),  # another subnet trusted
])
def test_firewalld_nothing_twice(listing, trusted, changes):
    n = node(firewalld_state="running\n", firewalld_list=fixture(listing),
             firewalld_trusted=trusted)
    assert len(fw.plan_node(n, master=True, port=29500, subnet=SUBNET).steps) == changes


def test_ufw_default_deny_gets_allow_from_subnet():
    n = node(ufw=fixture("ufw-status-verbose-active.txt"))
    plan = fw.plan_node(n, master=True, port=29500, subnet=SUBNET)
    assert plan.firewall == "ufw" and commands(plan) == [f"ufw allow from {SUBNET}"]


@pytest.mark.parametrize("subnet, changes", [
    ("10.1.2.0/24", 0),  # inside 'Anywhere ALLOW 10.0.0.0/8'
    ("192.168.7.0/24", 0),  # inside 'Anywhere ALLOW 192.168.0.0/16'
    ("198.51.100.0/24", 1),  # an ALLOW for other sources does not count for the cluster
])
def test_ufw_source_rules_count_only_when_they_hold_the_cluster(subnet, changes):
    n = node(ufw=fixture("ufw-status-active.txt"))
    plan = fw.plan_node(n, master=True, port=29500, subnet=subnet)
    assert len(plan.steps) == changes, plan


def test_ufw_inactive_falls_through_to_iptables():
    n = node(ufw=fixture("ufw-status-inactive.txt"),
             iptables=fixture("iptables-S-drop-policy-reject.txt"))
    plan = fw.plan_node(n, master=False, port=29500, subnet=SUBNET)
    assert plan.firewall == "iptables"
    assert commands(plan) == [f"iptables -I INPUT -s {SUBNET} -j ACCEPT"]
    assert any("lost at reboot" in note for note in plan.notes)


@pytest.mark.parametrize("persist, command", [
    (("/etc/iptables/rules.v4",), "iptables-save > /etc/iptables/rules.v4"),
    (("/etc/sysconfig/iptables",), "iptables-save > /etc/sysconfig/iptables"),
    (("netfilter-persistent",), "netfilter-persistent save"),
])
def test_iptables_is_persisted_the_distribution_way(persist, command):
    n = node(persist=persist, iptables=fixture("iptables-S-drop-policy-reject.txt"))
    plan = fw.plan_node(n, master=True, port=29500, subnet=SUBNET)
    assert [s.command for s in plan.persist] == [command] and not plan.notes


def test_iptables_rendezvous_only_opens_the_port():
    rules = fixture("iptables-S-drop-tcp-80.txt").replace("--dport 80", "--dport 29500")
    plan = fw.plan_node(node(iptables=rules), master=True, port=29500, subnet=SUBNET)
    assert [s.command for s in plan.steps] == ["iptables -I INPUT -p tcp --dport 29500 -j ACCEPT"]
    worker = fw.plan_node(node(iptables=rules), master=False, port=29500, subnet=SUBNET)
    assert worker.steps == ()  # workers need no rendezvous port


def test_iptables_accept_for_other_sources_is_not_trust():
    rules = IPT_OPEN.replace("ACCEPT", "DROP", 1) + "-A INPUT -s 192.168.9.0/24 -j ACCEPT\n"
    plan = fw.plan_node(node(iptables=rules), master=False, port=29500, subnet=SUBNET)
    assert [s.command for s in plan.steps] == [f"iptables -I INPUT -s {SUBNET} -j ACCEPT"]
    after = rules + f"-A INPUT -s {SUBNET} -j ACCEPT\n"
    assert fw.plan_node(node(iptables=after), master=True, port=29500, subnet=SUBNET).steps == ()


def test_nft_chain_parser_and_verdicts():
    chains = parse_chains(fixture("nft-list-ruleset-s-inet-drop.txt"))
    assert [(c.family, c.table, c.name, c.hook, c.policy) for c in chains] == [
        ("ip", "filter", "INPUT", "input", "accept"),
        ("inet", "filter", "input", "input", "drop"),
        ("inet", "filter", "forward", "forward", "accept")]
    assert chains[0].iptables_managed and not chains[1].iptables_managed
    inp = chains[1]
    assert chain_verdict(inp, 29500, SUBNET)[0] == "accept"  # in the dport set
    assert chain_verdict(inp, 40500, SUBNET)[0] == "accept"  # in the set's range
    assert chain_verdict(inp, 45000, "192.168.1.0/24") == ("drop", "policy drop")
    assert chain_verdict(inp, 45000, SUBNET)[1] == "ip saddr 10.0.0.0/8 drop"  # 10.20 is in it
    assert not trusts(inp, SUBNET)


def test_nft_plan_skips_iptables_tables_and_persists_to_nftables_conf():
    n = node(nft=fixture("nft-list-ruleset-s-inet-drop.txt"), persist=("/etc/nftables.conf",))
    plan = fw.plan_node(n, master=False, port=29500, subnet=SUBNET)
    assert plan.firewall == "nftables"
    assert [s.command for s in plan.steps] == [
        f"nft insert rule inet filter input ip saddr {SUBNET} accept"]
    assert plan.persist[0].command.endswith("nft -s list ruleset; } > /etc/nftables.conf")
    trusted = fixture("nft-list-ruleset-s-inet-drop.txt").replace(
        "\t\tct state", f"\t\tip saddr {SUBNET} accept\n\t\tct state")
    assert fw.plan_node(node(nft=trusted), master=True, port=29500, subnet=SUBNET).steps == ()


def test_stop_firewall_only_when_asked_and_with_a_warning():
    n = node(ufw=fixture("ufw-status-verbose-active.txt"))
    plan = fw.plan_node(n, master=True, port=29500, subnet=SUBNET, stop=True)
    assert commands(plan) == ["ufw disable"]
    assert any("every port of this node is open" in note for note in plan.notes)


def test_without_root_or_sudo_the_plan_says_so():
    n = node(access="none", ufw=fixture("ufw-status-verbose-active.txt"))
    plan = fw.plan_node(n, master=True, port=29500, subnet=SUBNET)
    assert plan.steps and "needs root" in plan.error and "as root" in plan.fix
    sudo = fw.plan_node(node(access="sudo", ufw=fixture("ufw-status-verbose-active.txt")),
                        master=True, port=29500, subnet=SUBNET)
    assert "sudo -n sh -c" in fw.apply_script(sudo)[2]
    assert sudo.steps[0].shown(True) == f"sudo ufw allow from {SUBNET}"


def test_facts_script_output_is_split_into_sections():
    out = ("@@ddpkit access\nroot\n@@ddpkit iptables\n-P INPUT DROP\n@@ddpkit addrs\n"
           "2: eth0    inet 10.20.0.5/24 brd 10.20.0.255 scope global eth0\n"
           "@@ddpkit persist\n/etc/nftables.conf\n")
    n = fw.node_from_output(Host("node0"), out)
    assert n.access == "root" and n.outputs["iptables"] == "-P INPUT DROP\n"
    assert n.addrs == (Addr("eth0", "10.20.0.5/24"),) and n.persist == ("/etc/nftables.conf",)


# ---- ssh ------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, name", [
    ({"hostname": "10.0.0.2", "port": "22"}, "10.0.0.2"),
    ({"hostname": "10.0.0.2", "port": "2222"}, "[10.0.0.2]:2222"),
    ({"hostname": "10.0.0.2", "port": "22", "hostkeyalias": "gpu1"}, "gpu1"),
    ({}, "node1"),
])
def test_known_hosts_name(settings, name):
    assert ssh.known_hosts_name(settings, "node1") == name


def test_ssh_outputs_are_read():
    keygen = ("# Host 10.0.0.2 found: line 3\n"
              "10.0.0.2 ED25519 SHA256:L5bgqSvkvCpllIjGIUrytspE/jfJJyv8E5yt3O4tzRE\n")
    assert ssh.parse_fingerprints(keygen) == [
        "ED25519 SHA256:L5bgqSvkvCpllIjGIUrytspE/jfJJyv8E5yt3O4tzRE"]
    assert ssh.changes_in("changed: created ~/.ssh\nnoise\nchanged: added key root@a\n") == [
        "created ~/.ssh", "added key root@a"]
    pairs = ssh.parse_pairs("node0", "pair: node1 0 Warning: Permanently added 'node1' (ED25519)"
                            " to the list of known hosts.\npair: node2 255 ssh: Could not "
                            "resolve hostname node2\n")
    assert [(p.dst, p.ok, new) for p, new in pairs] == [("node1", True, True),
                                                        ("node2", False, False)]
    assert "Could not resolve" in pairs[1][0].error
    fix = ssh.host_key_fix("10.0.0.2", ["/home/u/.ssh/known_hosts"])
    assert "ssh-keygen -R '10.0.0.2'" in fix and "never" not in fix


def test_authorize_script_is_quoted_as_argv():
    argv = ssh.authorize_argv(["ssh-ed25519 AAAA me@here"])
    assert argv[:2] == ["sh", "-c"] and argv[-1] == "ssh-ed25519 AAAA me@here"


# ---- torch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("driver, version, build", [
    ("", "2.7.1", "cpu"),
    ("570.86.15", "2.7.1", "cu128"),
    ("550.54.14", "2.7.1", "cu118"),  # CUDA 12.4's driver: 2.7 has no 12.4 build
    ("550.54.14", "2.5.1", "cu124"),
    ("535.104.05", "2.5.1", "cu121"),
    ("580.65.06", "2.9.0", "cu130"),
    ("450.80.02", "2.7.1", ""),  # too old for any build of 2.7
])
def test_build_for_a_driver(driver, version, build):
    assert st.build_for(driver, version) == build


def tn(host, torch="", driver="", python="3.11.7", **kw):
    return st.TorchNode(host, python, torch, driver, **kw)


def test_plan_torch_keeps_installs_and_uses_one_build_everywhere():
    nodes = [tn("a", "2.7.1+cu128", "570.86.15"), tn("b", "", "550.54.14"),
             tn("c", "2.7.1+cu118", "550.54.14")]
    plan = st.plan_torch(nodes, "2.7.1", python="/venv/bin/python")
    assert [(s.host, s.action, s.want) for s in plan.steps] == [
        ("a", "install", "2.7.1+cu118"), ("b", "install", "2.7.1+cu118"),
        ("c", "keep", "2.7.1+cu118")]
    assert "index-url https://download.pytorch.org/whl/cu118" in plan.steps[1].command
    assert any("drivers differ" in n for n in plan.notes)


def test_plan_torch_refuses_a_silent_downgrade():
    plan = st.plan_torch([tn("a", "2.8.0+cpu")], "2.7.1", python="py")
    (step,) = plan.steps
    assert step.action == "refuse" and not plan.ok and "--allow-downgrade" in step.fix
    allowed = st.plan_torch([tn("a", "2.8.0+cpu")], "2.7.1", python="py", allow_downgrade=True)
    assert allowed.steps[0].action == "install" and allowed.steps[0].reason == "downgrade"


def test_plan_torch_from_a_wheel_dir():
    wheels = ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", "sympy-1.14.0-py3-none-"
              "any.whl"]
    plan = st.plan_torch([tn("a"), tn("b", python="3.10.12")], "2.13.0", python="py",
                         wheels=wheels)
    assert "--no-index --find-links WHEEL_DIR torch==2.13.0+cpu" in plan.steps[0].command
    assert plan.steps[1].action == "error" and "cp310" in plan.steps[1].reason
    assert any("newer than ddpkit's table" in n for n in plan.notes)


def test_choose_version_and_node_facts():
    assert st.choose_version("2.6.0", "2.13.0+cpu", []) == "2.6.0"
    assert st.choose_version(None, "2.13.0+cpu", []) == "2.13.0"
    assert st.choose_version(None, "", [tn("a", "2.5.1+cu124"), tn("b", "2.6.0")]) == "2.6.0"
    out = ('@@ddpkit probe\n{"python": "3.11.7", "torch": "2.13.0+cpu", "missing": []}\n'
           "@@ddpkit smi\n550.54.14\n")
    assert st.node_from_output("a", "py", out) == tn("a", "2.13.0+cpu", "550.54.14")
    no_pip = out.replace('"missing": []', '"missing": ["pip"]')
    assert not st.node_from_output("a", "py", no_pip).pip
    missing = st.node_from_output("a", "/no/python", "@@ddpkit probe\nsh: 1: /no/python: not "
                                  "found\n@@ddpkit pip\n")
    assert "does not run" in missing.error and "--python" in missing.fix
