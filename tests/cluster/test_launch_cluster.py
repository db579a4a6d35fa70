"""`ddpkit launch` on the 3-node virtual cluster: real sshd, real addresses, real torchrun."""

import os
import re
import signal
import subprocess
import time

import pytest

from tests.conftest import ddpkit
from tests.launching import SCRIPTS, Running


def launch(vc, hosts, *args, env=None, timeout=120):
    return ddpkit("launch", "--ssh-config", str(vc.ssh_config), "-H", hosts, *args, env=env,
                  timeout=timeout)


def param_sums(out):
    return {m.group(1): m.group(2) for m in re.finditer(r"PARAMS rank=(\d+) .* sum=(\S+)", out)}


@pytest.fixture(autouse=True)
def no_leftovers_after(vcluster):
    yield
    assert vcluster.wait_no_leftovers(15) == {}, "processes of a run outlived it"


def test_three_nodes_one_process_each(vcluster):
    done = launch(vcluster, vcluster.hosts_spec(1), str(SCRIPTS / "train_ddp.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    sums = param_sums(done.stdout)
    assert sorted(sums) == ["0", "1", "2"] and len(set(sums.values())) == 1
    hosts = {m.group(1) for m in re.finditer(r"^(node\d):\d+ +\| PARAMS", done.stdout, re.M)}
    assert hosts == {"node0", "node1", "node2"}
    assert "world=3" in done.stdout


def test_two_nodes_two_processes_each(vcluster):
    done = launch(vcluster, vcluster.hosts_spec(2, vcluster.nodes[:2]), str(SCRIPTS / "train_ddp.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    sums = param_sums(done.stdout)
    assert sorted(sums) == ["0", "1", "2", "3"] and len(set(sums.values())) == 1


def test_env_forwarding_reaches_every_node_and_nothing_else_leaks(vcluster):
    env = {"NCCL_DEBUG": "WARN", "MY_SETTING": "42", "NOT_FORWARDED": "secret"}
    done = launch(vcluster, vcluster.hosts_spec(1), "-x", "MY_SETTING", "--env", "EXTRA=x y",
                  "--env", "ENV_NAMES=NCCL_DEBUG,MY_SETTING,EXTRA,NOT_FORWARDED,GLOO_SOCKET_IFNAME",
                  str(SCRIPTS / "echo_env.py"), env=env)
    assert done.returncode == 0, done.stderr
    for rank in range(3):
        for expect in ("NCCL_DEBUG=WARN", "MY_SETTING=42", "EXTRA=x y", "NOT_FORWARDED=<unset>",
                       "GLOO_SOCKET_IFNAME=eth0"):
            assert f"ENV {rank} {expect}" in done.stdout, done.stdout


def test_failure_on_one_node_stops_all_within_15s(vcluster):
    run = Running(["launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                   vcluster.hosts_spec(1), str(SCRIPTS / "fail_on_rank.py")],
                  env={"FAIL_RANK": "1", "FAIL_AFTER": "1"})
    try:
        ready = run.wait_for(r"^(node\d):1 +\| READY rank=1", timeout=90)[0]
        failing_host = ready.group(1)
        t_fail = time.monotonic() + 1  # the rank raises one second after READY
        rc = run.wait(timeout=60)
        assert rc != 0
        assert time.monotonic() - t_fail < 15, "teardown took too long"
        assert f"FAILED: {failing_host} failed first" in run.output
        assert "RuntimeError: planned failure on rank 1" in run.output
    finally:
        run.kill()


def sleepers(vc):
    """A 3-node run whose ranks say READY and then sleep; returns once all are ready."""
    run = Running(["launch", "--ssh-config", str(vc.ssh_config), "-H", vc.hosts_spec(1),
                   str(SCRIPTS / "sleeper.py")])
    try:
        run.ready_pids(3, timeout=90)
    except BaseException:
        run.kill()
        raise
    return run


def test_sigint_mid_run_leaves_nothing(vcluster):
    run = sleepers(vcluster)
    try:
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=30) == 130
        assert "STOPPED by SIGINT" in run.output
    finally:
        run.kill()


def test_sigkilled_launcher_leaves_no_orphans(vcluster):
    run = sleepers(vcluster)
    try:
        assert vcluster.leftover_pids(), "the run should be alive on the nodes"
        os.kill(run.proc.pid, signal.SIGKILL)
        run.wait(timeout=10)
        assert vcluster.wait_no_leftovers(20) == {}
    finally:
        run.kill()


def test_demo_across_nodes(vcluster):
    done = ddpkit("demo", "--ssh-config", str(vcluster.ssh_config), "-H", vcluster.hosts_spec(1),
                  "--nproc-per-node", "1", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().endswith("PASS")


def test_abort_at_exit_is_reported_quickly_not_after_the_exit_barrier(vcluster):
    started = time.monotonic()
    done = launch(vcluster, vcluster.hosts_spec(1), str(SCRIPTS / "abort_at_exit.py"),
                  env={"ABORT_RANK": "2"}, timeout=200)
    took = time.monotonic() - started
    assert done.stdout.count("TRAINED") == 3  # training itself succeeded everywhere
    assert done.returncode != 0, "a rank died with SIGABRT: the run must not report success"
    assert took < 60, f"took {took:.0f}s: waited out torchrun's 300 s exit barrier?"
    assert "SIGABRT" in done.stderr
    aborted = re.search(r"^(node\d):2 +\| TRAINED", done.stdout, re.M).group(1)
    assert f"FAILED: {aborted} failed first" in done.stderr


def test_hostnames_on_loopback_still_work(vcluster):
    """Every node's hostname maps to 127.0.1.1 (Debian/Ubuntu's default): Gloo and c10d would
    publish loopback addresses. The launcher pins GLOO/NCCL_SOCKET_IFNAME and --local-addr to
    each node's interface on the shared subnet, so the run works anyway."""
    saved = {n.name: n.hosts_file.read_text() for n in vcluster.nodes}
    for n in vcluster.nodes:
        n.write_hosts(f"127.0.0.1 localhost\n127.0.1.1 {n.name}\n")
    try:
        done = launch(vcluster, vcluster.hosts_spec(1), str(SCRIPTS / "train_ddp.py"))
    finally:
        for n in vcluster.nodes:
            n.write_hosts(saved[n.name])
    assert done.returncode == 0, done.stdout + done.stderr
    sums = param_sums(done.stdout)
    assert sorted(sums) == ["0", "1", "2"] and len(set(sums.values())) == 1


def test_dropped_ssh_session_stops_the_run(vcluster):
    run = sleepers(vcluster)
    try:
        node = vcluster.nodes[1]
        pids = subprocess.run(["ip", "netns", "pids", node.ns], capture_output=True,
                              text=True).stdout.split()
        sessions = [int(p) for p in pids if int(p) != node.sshd.pid
                    and open(f"/proc/{p}/comm").read().strip() == "sshd"]
        assert sessions, "no SSH session on node1"
        for pid in sessions:
            os.kill(pid, signal.SIGKILL)  # the connection dies as if the node or link went away
        assert run.wait(timeout=60) == 1
        assert "FAILED: node1 failed first" in run.output
        assert "SSH session lost" in run.output
    finally:
        run.kill()


def test_this_machine_as_node0_with_a_remote_node(vcluster):
    """The usual way: run the launcher on node0 and name it localhost. The local share runs
    without SSH; the rendezvous is this machine's address on the subnet node1 shares."""
    done = launch(vcluster, "localhost:1,node1:1", str(SCRIPTS / "train_ddp.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    sums = param_sums(done.stdout)
    assert sorted(sums) == ["0", "1"] and len(set(sums.values())) == 1
    assert re.search(r"^localhost:\d +\| PARAMS", done.stdout, re.M)
    dry = launch(vcluster, "localhost:1,node1:1", "--dry-run", str(SCRIPTS / "train_ddp.py"))
    assert f"c10d at {vcluster.subnet_prefix}.1:29500" in dry.stdout
    assert "via this machine" in dry.stdout and "via ssh node1" in dry.stdout


def test_a_cut_network_stops_the_cut_off_node_too(vcluster):
    """node1 loses the launcher (every packet from it dropped, as in a partition): SSH notices
    within ~15 s and the launcher stops the others; node1's guard hears no heartbeat and stops
    its own node, although its sshd would not notice the dead connection for hours."""
    run = Running(["launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                   vcluster.hosts_spec(1, vcluster.nodes[:2]), "--heartbeat-timeout", "6",
                   str(SCRIPTS / "sleeper.py")])
    try:
        run.ready_pids(2, timeout=90)
        with vcluster.nodes[1].firewall("-s", f"{vcluster.subnet_prefix}.1", "-j", "DROP"):
            assert run.wait(timeout=60) == 1
            assert "SSH session lost" in run.output
            assert vcluster.wait_no_leftovers(20) == {}
    finally:
        run.kill()
