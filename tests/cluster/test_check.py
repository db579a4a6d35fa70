"""`ddpkit check` on the virtual cluster: each fault that makes plain torchrun hang is found and
named (node, port, cause, fix) within 10 s."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, ddpkit


def check(vc, *args, timeout=60):
    started = time.monotonic()
    done = ddpkit("check", "--ssh-config", str(vc.ssh_config), "--ssh-timeout", "3", "-H",
                  vc.hosts_spec(1), "--json", *args, timeout=timeout)
    took = time.monotonic() - started
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert took < 10, f"check took {took:.1f} s"
    return done.returncode, report


def problems(report, kind=None):
    return [p for p in report["problems"] if kind is None or p["kind"] == kind]


def link_states(report, dst, port=None):
    return {(lk["src"], lk["state"]) for lk in report["links"]
            if lk["dst"] == dst and (port is None or lk["port"] == port)}


def test_healthy_cluster_passes(vcluster):
    rc, report = check(vcluster)
    assert rc == 0 and report["status"] == "ok", report["problems"]
    assert len(report["links"]) == 3 * 2 + 2  # every peer pair both ways + two to the rendezvous
    assert all(lk["state"] == "ok" for lk in report["links"])
    rec = report["recommend"]
    assert rec["master_addr"] == vcluster.nodes[0].ip and rec["NCCL_SOCKET_IFNAME"] == "eth0"
    assert report["mismatches"] == []
    assert [n["host"] for n in report["nodes"]] == ["node0", "node1", "node2"]


@pytest.mark.parametrize("action, state", [("DROP", "filtered"), ("REJECT", "refused")])
def test_rendezvous_port_blocked_on_master(vcluster, action, state):
    with vcluster.nodes[0].firewall("-p", "tcp", "--dport", "29500", "-j", action):
        rc, report = check(vcluster)
    assert rc == 1
    assert link_states(report, "node0", 29500) == {("node1", state), ("node2", state)}
    (p,) = [p for p in problems(report, "link") if p["where"].endswith("node0:29500")]
    assert "node1, node2 cannot reach node0 on the rendezvous port 29500" in p["message"]
    assert "iptables -I INPUT -p tcp --dport 29500 -j ACCEPT" in p["fix"]  # node0's firewall


def test_missing_key_is_found(vcluster):
    node = vcluster.nodes[1]
    keys = node.authorized_keys.read_text()
    node.authorized_keys.write_text("")
    try:
        rc, report = check(vcluster)
    finally:
        node.authorized_keys.write_text(keys)
    assert rc == 1
    (p,) = problems(report, "ssh")
    assert p["where"] == "node1" and "SSH key not accepted" in p["message"]
    assert "ssh-copy-id node1" in p["fix"]


def test_hostname_on_loopback_is_found(vcluster):
    node = vcluster.nodes[2]
    good = node.hosts_file.read_text()
    node.write_hosts(f"127.0.0.1 localhost\n127.0.1.1 {node.name}\n")
    try:
        rc, report = check(vcluster)
    finally:
        node.write_hosts(good)
    assert rc == 1
    (p,) = problems(report, "hostname")
    assert p["where"] == "node2" and "127.0.1.1" in p["message"]
    assert f"{node.ip} node2" in p["fix"] and "GLOO_SOCKET_IFNAME=eth0" in p["fix"]


def test_dropped_link_between_two_workers_is_found(vcluster):
    n1, n2 = vcluster.nodes[1], vcluster.nodes[2]
    with n2.firewall("-s", n1.ip, "-p", "tcp", "!", "--dport", "22", "-j", "DROP"):
        rc, report = check(vcluster)
    assert rc == 1
    assert all(lk["state"] == "ok" for lk in report["links"] if lk["dst"] == "node0")
    (p,) = problems(report, "link")
    assert p["where"] == "node1 <-> node2"
    assert "trust" not in p["message"] and "-s 198.18." in p["fix"]


def make_other_env(base: Path) -> Path:
    """Another environment: Debian's own Python (a different patch release) with a torch
    2.1.0+cu118 install as its files show it (the doctor reads torch/version.py, it never
    imports torch), plus ddpkit from this checkout and copies of its dependencies."""
    venv = base / "othervenv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python3*/site-packages"))
    torch = site / "torch"
    torch.mkdir()
    (torch / "__init__.py").write_text("")
    (torch / "version.py").write_text("__version__ = '2.1.0+cu118'\ncuda = '11.8'\nhip = None\n")
    main_site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    for dep in ("rich", "psutil", "pygments", "markdown_it", "mdurl"):
        shutil.copytree(main_site / dep, site / dep, symlinks=True)
    (site / "ddpkit-src.pth").write_text(f"{ROOT / 'src'}\n")
    return venv


@pytest.mark.skipif(not Path("/usr/bin/python3").exists(), reason="needs Debian's python3")
def test_node_with_another_python_and_torch_is_the_odd_one_out(vcluster, tmp_path):
    """node2 has another environment at the same path (each node has its own disk in real
    clusters): its mount namespace shows the other venv where this venv is."""
    other = make_other_env(tmp_path)
    node = vcluster.nodes[2]
    node.run(["mount", "--bind", str(other), sys.prefix], check=True)
    try:
        rc, report = check(vcluster)
    finally:
        node.run(["umount", sys.prefix], check=True)
    assert rc == 1, report["problems"]
    fields = {m["field"]: m for m in report["mismatches"]}
    assert fields["torch"]["odd"] == ["node2"]
    assert fields["torch"]["values"]["node2"] == "2.1.0+cu118"
    assert fields["cuda"]["odd"] == ["node2"] and fields["cuda"]["values"]["node0"] == "cpu"
    assert fields["python"]["odd"] == ["node2"]
    assert any(p["kind"] == "mismatch" and p["severity"] == "fail" for p in problems(report))


def test_launch_refuses_a_run_that_would_hang(vcluster):
    started = time.monotonic()
    with vcluster.nodes[0].firewall("-p", "tcp", "--dport", "29500", "-j", "DROP"):
        done = ddpkit("launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                      vcluster.hosts_spec(1), str(ROOT / "tests" / "scripts" / "sleeper.py"))
    assert done.returncode == 1 and time.monotonic() - started < 15
    assert "cannot reach node0 on the rendezvous port 29500: filtered" in done.stderr
    assert "nothing was started" in done.stderr and "READY" not in done.stdout


def test_human_output_has_the_tables(vcluster):
    done = ddpkit("check", "--ssh-config", str(vcluster.ssh_config), "-H", vcluster.hosts_spec(1),
                  env={"COLUMNS": "150"})
    assert done.returncode == 0, done.stdout + done.stderr
    for words in ("ddpkit check: 3 node(s)", "links (row dials column)", "rdzv ok",
                  "export NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0", "cluster ready"):
        assert words in done.stdout, done.stdout
    assert os.environ.get("CI") is None or "Traceback" not in done.stderr
