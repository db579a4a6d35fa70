"""Issue 11 on the 3-node virtual cluster: one SSH login per node for a whole launch (the
preflight's session becomes the node's guard), silent ranks counted, a dry run that plans
around a node it cannot reach."""

import shutil

import pytest

from tests.conftest import ddpkit
from tests.launching import SCRIPTS


@pytest.fixture(autouse=True)
def no_leftovers_after(vcluster):
    yield
    assert vcluster.wait_no_leftovers(15) == {}, "processes of a run outlived it"


def test_a_launch_logs_in_once_per_node(vcluster, tmp_path):
    log = tmp_path / "ssh.log"
    shim = tmp_path / "bin" / "ssh"
    shim.parent.mkdir()
    # one line per connection (`ssh -G` only prints the configuration)
    shim.write_text(f'#!/bin/sh\ncase " $* " in *" -G "*) ;; *) echo login >> {log} ;; esac\n'
                    f'exec {shutil.which("ssh")} "$@"\n')
    shim.chmod(0o755)
    path = f"{shim.parent}:{__import__('os').environ['PATH']}"
    done = ddpkit("launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                  vcluster.hosts_spec(1), str(SCRIPTS / "rank0_only.py"), env={"PATH": path})
    assert done.returncode == 0, done.stderr
    assert "world=3" in done.stdout
    assert "OK: 3 node(s), 3 rank(s)" in done.stderr  # ranks 1 and 2 printed nothing
    logins = log.read_text().splitlines()
    assert len(logins) == 3, logins  # the preflight's sessions ran the job too


def test_dry_run_plans_around_an_unreachable_node(vcluster):
    done = ddpkit("launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                  "node0,nohost.invalid", "--dry-run", str(SCRIPTS / "rank0_only.py"))
    assert done.returncode == 1
    node0 = vcluster.nodes[0].ip
    assert f"rendezvous c10d at {node0}:" in done.stdout
    assert "--local-addr '<address of nohost.invalid>'" in done.stdout
    assert "nohost.invalid: host name does not resolve" in done.stderr
