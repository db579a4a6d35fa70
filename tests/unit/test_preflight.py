"""Cluster judgement as pure functions: mismatches, link problems, recommendations."""

from ddpkit.launch.hosts import Host
from ddpkit.launch.netcheck import Link, LinkReport, link_problems
from ddpkit.launch.plan import Addr, NodeFacts
from ddpkit.verify.preflight import NodeCheck, find_mismatches, judge, recommendation


def node(name, **facts):
    base = {"python": "3.11.7", "python_minor": "3.11", "torch": "2.13.0+cu128", "cuda": "12.8",
            "nccl": "2.27.3", "driver": "570.124.06", "gpu_model": "NVIDIA H100", "gpu_count": 8,
            "ddpkit": "0.1.0", "hostname": name, "hostname_addrs": ["10.0.0.1"],
            "firewall": "firewalld", "addrs": [f"eth0 10.0.0.{name[-1]}/24"]}
    base.update(facts)
    return NodeCheck(Host(name), base, doctor={"status": "ok", "checks": []})


def test_consistent_nodes_have_no_mismatch():
    assert find_mismatches([node("n0"), node("n1"), node("n2")]) == []


def test_odd_one_out_is_named():
    nodes = [node("n0"), node("n1", torch="2.1.0+cu118", cuda="11.8"), node("n2")]
    got = {m["field"]: m for m in find_mismatches(nodes)}
    assert got["torch"]["odd"] == ["n1"] and got["torch"]["severity"] == "fail"
    assert got["cuda"]["values"] == {"n0": "12.8", "n1": "11.8", "n2": "12.8"}


def test_driver_difference_is_a_warning_only():
    nodes = [node("n0"), node("n1", driver="535.104.05")]
    (m,) = find_mismatches(nodes)
    assert m["field"] == "driver" and m["severity"] == "warn" and m["odd"] == ["n0", "n1"]
    assert all(p.severity == "warn" for p in judge(nodes, LinkReport((), {}, {}), {}, 29500, "n0"))


def test_python_minor_difference_replaces_the_patch_level_row():
    nodes = [node("n0"), node("n1"), node("n2", python="3.10.12", python_minor="3.10")]
    fields = [m["field"] for m in find_mismatches(nodes)]
    assert "python_minor" in fields and "python" not in fields


def link(src, dst, state, kind="peer", port=40000):
    return Link(src=src, dst=dst, ip=f"10.0.0.{dst[-1]}", port=port, kind=kind, state=state)


def test_blocked_rendezvous_port_names_the_firewall_of_the_master():
    nodes = {n: node(n) for n in ("n0", "n1", "n2")}
    links = [link("n1", "n0", "filtered", "rendezvous", 29500),
             link("n2", "n0", "filtered", "rendezvous", 29500), link("n1", "n2", "ok")]
    (p,) = link_problems(links, nodes, "10.0.0.0/24", 29500)
    assert p.where == "n1, n2 -> n0:29500"
    assert "filtered" in p.message and "15 min" in p.message
    assert "firewall-cmd --permanent --add-port=29500/tcp" in p.fix
    assert "--add-source=10.0.0.0/24" in p.fix


def test_peer_link_blocked_both_ways_is_one_problem():
    nodes = {n: node(n, firewall="ufw") for n in ("n1", "n2")}
    links = [link("n1", "n2", "filtered", port=40001), link("n2", "n1", "filtered", port=40002)]
    (p,) = link_problems(links, nodes, "10.0.0.0/24", 29500)
    assert p.where == "n1 <-> n2" and "ufw allow from 10.0.0.0/24" in p.fix


def test_refused_while_listening_means_reject():
    (p,) = link_problems([link("n1", "n0", "refused", "rendezvous", 29500)], {}, "", 29500)
    assert "rejects it" in p.message and "iptables -I INPUT -p tcp --dport 29500" in p.fix


def test_recommendation_same_and_different_interface_names():
    f = [NodeFacts(addrs=(Addr("eth0", "10.0.0.1/24"), Addr("docker0", "172.17.0.1/16"))),
         NodeFacts(addrs=(Addr("ens5", "10.0.0.2/24"),))]
    rec = recommendation([Host("a"), Host("b")], f, "10.0.0.1", ["eth0", "ens5"], "", 29500)
    assert rec["NCCL_SOCKET_IFNAME"] == {"a": "eth0", "b": "ens5"}
    assert rec["avoid"] == {"a": ["docker0"]} and rec["subnet"] == "10.0.0.0/24"
    same = recommendation([Host("a"), Host("b")], f, "10.0.0.1", ["eth0", "eth0"], "", 29500)
    assert "export NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" in same["exports"]


def test_hostname_on_loopback_is_a_failure_with_both_fixes():
    nodes = [node("n0"), node("n1", hostname_addrs=["127.0.1.1"])]
    probs = judge(nodes, LinkReport((), {}, {}), {"GLOO_SOCKET_IFNAME": "eth0"}, 29500, "n0")
    (p,) = [p for p in probs if p.kind == "hostname"]
    assert p.severity == "fail" and "10.0.0.1 n1" in p.fix and "GLOO_SOCKET_IFNAME=eth0" in p.fix


def test_port_in_use_on_master():
    probs = judge([node("n0")], LinkReport((), {"n0": "Address already in use"}, {}), {}, 29500, "n0")
    (p,) = probs
    assert p.kind == "port" and "ss -ltnp" in p.fix


def test_hostname_on_loopback_is_fine_on_one_machine():
    """As doctor says: only peers dial the published address (issue 11)."""
    probs = judge([node("n0", hostname_addrs=["127.0.0.1"])], LinkReport((), {}, {}), {}, 29500,
                  "n0")
    assert not [p for p in probs if p.kind == "hostname"]
