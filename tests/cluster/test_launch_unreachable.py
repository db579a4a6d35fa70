"""A host that cannot be reached fails the launch before anything starts, with the SSH error
classified and its fix."""

import pytest

from tests.conftest import ddpkit
from tests.launching import SCRIPTS


def launch(vc, *args, config=None, timeout=60):
    return ddpkit("launch", "--ssh-config", str(config or vc.ssh_config), "--ssh-timeout", "3",
                  "-H", vc.hosts_spec(1), *args, str(SCRIPTS / "sleeper.py"), timeout=timeout)


def assert_nothing_started(vc, done):
    assert done.returncode == 1, done.stdout + done.stderr
    assert "READY" not in done.stdout and "nothing was started" in done.stderr
    assert vc.wait_no_leftovers(5) == {}


def test_missing_key_is_explained(vcluster):
    node = vcluster.nodes[1]
    keys = node.authorized_keys.read_text()
    node.authorized_keys.write_text("")
    try:
        done = launch(vcluster)
    finally:
        node.authorized_keys.write_text(keys)
    assert_nothing_started(vcluster, done)
    assert "node1: SSH key not accepted" in done.stderr
    assert "ssh-copy-id node1" in done.stderr
    assert "node0:" not in done.stderr and "node2:" not in done.stderr


def test_changed_host_key_is_explained(vcluster, tmp_path):
    other = tmp_path / "other_key"
    import subprocess
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pub = (tmp_path / "other_key.pub").read_text().split()
    known = tmp_path / "known_hosts"
    known.write_text(f"{vcluster.nodes[2].ip} {pub[0]} {pub[1]}\n")
    config = tmp_path / "ssh_config"
    text = vcluster.ssh_config.read_text()
    text = text.replace("StrictHostKeyChecking no", "StrictHostKeyChecking accept-new")
    text = text.replace(f"UserKnownHostsFile {vcluster.known_hosts}", f"UserKnownHostsFile {known}")
    config.write_text(text)
    done = launch(vcluster, config=config)
    assert_nothing_started(vcluster, done)
    assert "node2: host key verification failed" in done.stderr
    assert "ssh-keygen -R node2" in done.stderr


@pytest.mark.parametrize("target, words, fix", [
    ("-j REJECT --reject-with tcp-reset", "connection refused", "start sshd"),
    ("-j DROP", "connection timed out", "TCP 22"),
])
def test_refused_and_timeout_are_explained(vcluster, target, words, fix):
    with vcluster.nodes[2].firewall("-p", "tcp", "--dport", "22", *target.split()):
        done = launch(vcluster)
    assert_nothing_started(vcluster, done)
    assert f"node2: {words}" in done.stderr and fix in done.stderr


def test_unknown_host_is_explained(vcluster):
    done = ddpkit("launch", "--ssh-config", str(vcluster.ssh_config), "-H", "node0,nosuchnode",
                  str(SCRIPTS / "sleeper.py"))
    assert done.returncode == 1
    assert "nosuchnode: host name does not resolve" in done.stderr
