"""`ddpkit setup ssh|firewall|torch` on a virtual cluster started bare: sshd with password
login only and empty ~/.ssh everywhere, firewalls that drop the rendezvous and the ephemeral
ports, a worker venv without torch. One bare cluster for the whole module."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import PYTHON
from tests.vcluster import VCluster, missing_requirements

PERSIST = ("/etc/nftables.conf", "/etc/iptables/rules.v4", "/etc/sysconfig/iptables")


@pytest.fixture(scope="module")
def bare():
    why = missing_requirements()
    if why:
        pytest.fail(f"virtual cluster unavailable: {why}", pytrace=False)
    vc = VCluster(3, bare=True, private_files=PERSIST)
    vc.up()
    vc.ssh_done = False
    yield vc
    vc.down()


def client(vc, *args: str, password: bool = False, timeout: float = 120):
    """ddpkit as run on the launching machine: its own (at first empty) ~/.ssh."""
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    if password:
        env.update(vc.askpass_env())
    return subprocess.run(vc.client_argv([PYTHON, "-m", "ddpkit", *args]), capture_output=True,
                          text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def client_ssh(vc, node: str, command: str):
    return subprocess.run(vc.client_argv(["ssh", "-o", "BatchMode=yes", node, command]),
                          capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def hosts(vc) -> str:
    return ",".join(n.name for n in vc.nodes)


def ensure_ssh(vc) -> None:
    if not vc.ssh_done:
        done = client(vc, "setup", "ssh", "-H", hosts(vc), password=True)
        assert done.returncode == 0, done.stdout + done.stderr
        vc.ssh_done = True


# ---- setup ssh ------------------------------------------------------------------------------

def test_setup_ssh_from_password_only(bare):
    before = client_ssh(bare, "node1", "true")
    assert before.returncode == 255 and "Host key verification failed" in before.stderr
    done = client(bare, "setup", "ssh", "-H", hosts(bare), "--json", password=True)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["changed"] and report["status"] == "ok"
    assert any("created the key" in c for c in report["local_changes"])
    for h in report["hosts"]:
        assert h["password_used"] and h["state"] == "ok"
        assert any(c.startswith("added key") for c in h["changes"]), h
        assert any(c.startswith("recorded the host key") for c in h["changes"]), h
        assert "SHA256:" in h["fingerprint"]
    for node in bare.nodes:  # 700/600, as sshd's StrictModes wants (and checks here)
        assert oct(node.dot_ssh.stat().st_mode & 0o777) == "0o700"
        assert oct((node.dot_ssh / "authorized_keys").stat().st_mode & 0o777) == "0o600"
        assert client_ssh(bare, node.name, "hostname").stdout.strip() == node.name
    known = str(bare.client_ssh / "known_hosts")  # Debian hashes the names in it
    for node in bare.nodes:
        assert subprocess.run(["ssh-keygen", "-F", node.ip, "-f", known],
                              capture_output=True).returncode == 0
    bare.ssh_done = True
    # the second run: no password needed, nothing changed, and it says so
    again = client(bare, "setup", "ssh", "-H", hosts(bare))
    assert again.returncode == 0, again.stderr
    assert "nothing to change" in again.stdout
    again = client(bare, "setup", "ssh", "-H", hosts(bare), "--json")
    report = json.loads(again.stdout)
    assert not report["changed"] and not any(h["password_used"] for h in report["hosts"])


def test_setup_ssh_all_pairs(bare):
    ensure_ssh(bare)
    done = client(bare, "setup", "ssh", "-H", hosts(bare), "--all-pairs", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert len(report["pairs"]) == 6 and all(p["ok"] for p in report["pairs"]), report["pairs"]
    assert all(any("recorded the host keys" in c for c in h["changes"]) for h in report["hosts"])
    # node1 -> node2 by name, BatchMode, as mpirun would do it
    hop = client_ssh(bare, "node1", "ssh -o BatchMode=yes node2 hostname")
    assert hop.stdout.strip() == "node2", hop.stderr
    again = client(bare, "setup", "ssh", "-H", hosts(bare), "--all-pairs", "--json")
    assert again.returncode == 0 and not json.loads(again.stdout)["changed"]


def test_changed_host_key_is_an_error_with_the_fix(bare):
    ensure_ssh(bare)
    node = bare.nodes[2]
    key = node.dir / "host_key"
    old = key.read_bytes(), (node.dir / "host_key.pub").read_bytes()
    key.unlink()
    (node.dir / "host_key.pub").unlink()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    try:
        bare.restart_sshd(node, node.extra_sshd_config)
        done = client(bare, "setup", "ssh", "-H", hosts(bare))
        assert done.returncode == 1
        assert "node2" in done.stdout and "CHANGED" in done.stdout
        assert f"ssh-keygen -R '{node.ip}'" in done.stdout
        assert "Permission denied" not in done.stdout
        # never replaced silently: the old key is still the one on record
        assert client_ssh(bare, "node2", "true").returncode == 255
    finally:
        key.write_bytes(old[0])
        (node.dir / "host_key.pub").write_bytes(old[1])
        bare.restart_sshd(node, node.extra_sshd_config)
    assert client_ssh(bare, "node2", "true").returncode == 0


# ---- setup firewall -------------------------------------------------------------------------

EPHEMERAL = "32768:60999"  # Linux's default ip_local_port_range: where NCCL and Gloo listen


def _nft(node, ruleset: str) -> None:
    done = node.run(["nft", "-f", "-"], input=ruleset)
    assert done.returncode == 0, done.stderr


def close_firewalls(vc) -> None:
    """node0 (the master): iptables drops 29500 and the ephemeral ports; node1: an nftables
    chain drops both; node2: an nftables chain with policy drop that lets only SSH in."""
    n0, n1, n2 = vc.nodes
    for port in ("29500", EPHEMERAL):
        n0.run(["iptables", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"], check=True)
    _nft(n1, "table inet filter {\n chain input {\n  type filter hook input priority 0;"
             " policy accept;\n  tcp dport 29500 drop\n  tcp dport 32768-60999 drop\n }\n}\n")
    _nft(n2, "table inet filter {\n chain input {\n  type filter hook input priority 0;"
             " policy drop;\n  ct state established,related accept\n  iif \"lo\" accept\n"
             "  tcp dport 22 accept\n }\n}\n")


@pytest.fixture()
def closed_firewalls(bare):
    close_firewalls(bare)
    yield bare
    n0, n1, n2 = bare.nodes
    n0.run(["iptables", "-F", "INPUT"])
    for node in (n1, n2):
        node.run(["nft", "flush", "ruleset"])


def test_setup_firewall_prints_applies_proves_and_is_idempotent(closed_firewalls):
    vc = closed_firewalls
    ensure_ssh(vc)
    host_conf = open("/etc/nftables.conf").read()
    subnet = f"{vc.subnet_prefix}.0/24"
    shown = client(vc, "setup", "firewall", "-H", hosts(vc))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    out = shown.stdout
    assert f"iptables -I INPUT -s {subnet} -j ACCEPT" in out  # node0
    assert f"nft insert rule inet filter input ip saddr {subnet} accept" in out  # node1, node2
    assert "--apply" in out
    # printing changed nothing: the rendezvous port is still dropped
    assert "29500 -j DROP" in vc.nodes[0].run(["iptables", "-S", "INPUT"]).stdout
    assert "-j ACCEPT" not in vc.nodes[0].run(["iptables", "-S", "INPUT"]).stdout

    done = client(vc, "setup", "firewall", "-H", hosts(vc), "--apply", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["applied"] == {"node0": "", "node1": "", "node2": ""}
    assert result["links_ok"] and len(result["links"]) == 8  # 6 peer links + 2 to rendezvous
    assert not result["after"]["changes_needed"]
    # persisted the way nftables does, in each node's own /etc/nftables.conf
    for node in vc.nodes[1:]:
        saved = vc.private_copy(node, "/etc/nftables.conf").read_text()
        assert saved.startswith("#!/usr/sbin/nft -f\nflush ruleset\n")
        assert f"ip saddr {subnet} accept" in saved
    node0 = next(n for n in result["nodes"] if n["host"] == "node0")
    assert any("iptables rules are lost at reboot" in n for n in node0["notes"])
    assert open("/etc/nftables.conf").read() == host_conf  # this machine's file untouched

    rules = [n.run(["sh", "-c", "iptables -S; nft -s list ruleset"]).stdout for n in vc.nodes]
    again = client(vc, "setup", "firewall", "-H", hosts(vc), "--apply")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to change" in again.stdout and "links ok" in again.stdout
    assert [n.run(["sh", "-c", "iptables -S; nft -s list ruleset"]).stdout
            for n in vc.nodes] == rules


# ---- setup torch ----------------------------------------------------------------------------

def fake_torch_wheel(directory, version: str) -> str:
    """A tiny wheel named and versioned like torch's CPU build (torch/version.py is what the
    probe reads). The push and the pip install are real; one real torch install (190 MB, 30 s
    to minutes on 2 loaded cores) is what benchmarks/newcomer_path.py does, then the demo."""
    import base64
    import hashlib
    import sys
    import zipfile

    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    name = f"torch-{version}-{tag}-{tag}-manylinux_2_28_x86_64.whl"
    info = f"torch-{version}.dist-info"
    files = {
        "torch/__init__.py": f"__version__ = {version!r}\n",
        "torch/version.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: ddpkit-test\nRoot-Is-Purelib: true\n"
                         f"Tag: {tag}-{tag}-manylinux_2_28_x86_64\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{path},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / name, "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
        whl.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name


def test_setup_torch_pushes_a_wheel_dir_into_a_venv_without_torch(bare, tmp_path):
    ensure_ssh(bare)
    subprocess.run([PYTHON, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    venv_py = str(tmp_path / "venv" / "bin" / "python")
    fake_torch_wheel(tmp_path / "wheels", "2.13.0+cpu")
    args = ("setup", "torch", "-H", hosts(bare), "--python", venv_py,
            "--wheel-dir", str(tmp_path / "wheels"))
    shown = client(bare, *args)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "--no-index --find-links" in shown.stdout and "torch==2.13.0+cpu" in shown.stdout
    assert not list((tmp_path / "venv" / "lib").glob("python*/site-packages/torch"))
    done = client(bare, *args, "--apply", "--json", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["after"] == {n.name: "2.13.0+cpu" for n in bare.nodes}
    assert "pushing 1 wheel(s)" in done.stderr  # the nodes have no internet: it came from here
    # the nodes share the venv (NFS-like): installed once, the others found it there
    assert "same environment as another node" in done.stderr
    again = client(bare, *args, "--apply")
    assert again.returncode == 0 and "nothing to change" in again.stdout
    older = fake_torch_wheel(tmp_path / "older", "2.12.0+cpu")
    down = client(bare, "setup", "torch", "-H", hosts(bare), "--python", venv_py,
                  "--wheel-dir", str(tmp_path / "older"), "--apply")
    assert down.returncode == 1 and "refusing to downgrade" in down.stdout, older


# ---- setup all ------------------------------------------------------------------------------

@pytest.fixture()
def fresh():
    """A bare cluster of its own (the module's one has keys by now), firewalls closed."""
    vc = VCluster(3, bare=True, private_files=PERSIST)
    vc.up()
    try:
        close_firewalls(vc)
        yield vc
    finally:
        vc.down()


def test_setup_all_from_bare_nodes_then_again(fresh, tmp_path):
    vc = fresh
    # a node that does not resolve: the ssh step names it with its fix, the others do not run
    stop = client(vc, "setup", "all", "-H", "node9", "--apply")
    assert stop.returncode == 1 and "fix: add 'node9' to /etc/hosts" in stop.stdout, stop.stdout
    assert "stopped at setup ssh (steps not run: setup firewall, setup torch)" in stop.stdout
    subprocess.run([PYTHON, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    venv_py = str(tmp_path / "venv" / "bin" / "python")
    fake_torch_wheel(tmp_path / "wheels", "2.13.0+cpu")
    args = ("setup", "all", "-H", hosts(vc), "--python", venv_py,
            "--wheel-dir", str(tmp_path / "wheels"), "--apply")
    done = client(vc, *args, "--json", password=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok" and result["changed"] and result["failed_step"] == ""
    assert [(s["step"], s["changed"]) for s in result["steps"]] == [
        ("ssh", True), ("firewall", True), ("torch", True)]
    ssh, firewall, torch = (s["result"] for s in result["steps"])
    assert all(h["password_used"] for h in ssh["hosts"])
    assert firewall["links_ok"] and torch["after"] == {n.name: "2.13.0+cpu" for n in vc.nodes}
    rules = [n.run(["sh", "-c", "iptables -S; nft -s list ruleset"]).stdout for n in vc.nodes]
    # again, without the password: every step says nothing changed, the links proved again
    again = client(vc, *args, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    out = again.stdout
    assert (out.index("step 1 of 3: setup ssh") < out.index("step 2 of 3: setup firewall")
            < out.index("step 3 of 3: setup torch") < out.index("nothing to change: SSH, "
                                                              "firewall and torch"))
    assert "links ok: 8 of 8" in out  # rendezvous port and every pair of nodes
    assert [n.run(["sh", "-c", "iptables -S; nft -s list ruleset"]).stdout
            for n in vc.nodes] == rules
    for node in vc.nodes:
        assert client_ssh(vc, node.name, "hostname").stdout.strip() == node.name
