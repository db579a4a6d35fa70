"""The doctor inside a virtual node: its own firewall, its own /etc/hosts."""

import json

from tests.conftest import PYTHON


def node_doctor(node):
    done = node.run([PYTHON, "-m", "ddpkit", "doctor", "--json"], timeout=60)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, {c["id"]: c for c in json.loads(done.stdout)["checks"]}


def test_dropped_master_port_fails_with_firewall_hint(vcluster):
    node = vcluster.nodes[1]
    with node.firewall("-p", "tcp", "--dport", "29500", "-j", "DROP"):
        rc, checks = node_doctor(node)
    fw = checks["port.firewall"]
    assert fw["status"] == "fail" and rc == 1
    assert "29500" in fw["summary"] and "dropped" in fw["summary"]
    assert "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT" in fw["hint"]
    # without the rule the same node passes the firewall check
    _, checks = node_doctor(node)
    assert checks["port.firewall"]["status"] == "ok"


def test_hostname_mapped_to_loopback_warns(vcluster):
    node = vcluster.nodes[2]
    good = vcluster.default_hosts(node)
    node.write_hosts(f"127.0.0.1 localhost\n127.0.1.1 {node.name}\n")
    try:
        _, checks = node_doctor(node)
    finally:
        node.write_hosts(good)
    c = checks["net.hostname"]
    assert c["status"] == "warn" and "127.0.1.1" in c["summary"]
    assert f"{node.ip} {node.name}" in c["hint"]
    _, checks = node_doctor(node)
    assert checks["net.hostname"]["status"] == "ok"
