"""`ddpkit stacks` and the run record on this machine: real py-spy, real torchrun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.stackdump import take_stacks
from tests.conftest import ddpkit
from tests.launching import SCRIPTS

WAITER = "import time\ndef wait_here():\n    time.sleep(600)\nprint('up', flush=True)\nwait_here()\n"


def fake_worker(run_id: str, rank: int = 0, python: str = sys.executable) -> subprocess.Popen:
    """A process with the environment torchrun gives its workers, waiting in wait_here()."""
    env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "1",
           "TORCHELASTIC_RUN_ID": run_id}
    proc = subprocess.Popen([python, "-c", WAITER], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def test_a_node_without_py_spy_gets_it_over_the_session(tmp_path, monkeypatch):
    """The node's interpreter has no py-spy beside it, none on PATH, an empty cache: the
    binary is sent over the agent session and kept in the node's cache."""
    bare = "/usr/bin/python3"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    worker = fake_worker("stacks-ship-test")
    try:
        nodes = take_stacks([Host("localhost")], [True], SshOptions(), bare, "stacks-ship-test")
    finally:
        worker.kill()
        worker.wait()
    cached = list((tmp_path / "ddpkit" / "bin").iterdir())
    assert [p.name.startswith("py-spy") for p in cached] == [True]
    assert os.access(cached[0], os.X_OK)
    (proc,) = nodes[0].procs
    assert proc.rank == 0 and proc.error == ""
    main = next(t for t in proc.threads if t["os_thread_id"] == proc.pid)
    assert [f["name"] for f in main["frames"]][:2] == ["wait_here", "<module>"]


def test_stacks_cli_on_hosts_finds_only_the_job_asked_for():
    mine, other = fake_worker("stacks-cli-a"), fake_worker("stacks-cli-b")
    try:
        done = ddpkit("stacks", "-H", "localhost", "--run-id", "stacks-cli-a", "--json")
        assert done.returncode == 0, done.stderr
        (job,) = json.loads(done.stdout)["jobs"]
        pids = [p["pid"] for n in job["nodes"] for p in n["procs"]]
        assert pids == [mine.pid]
        text = ddpkit("stacks", "-H", "localhost", "--run-id", "stacks-cli-a").stdout
        assert "rank 0 (localhost): wait_here() at <string>:3" in text, text
        missing = ddpkit("stacks", "-H", "localhost", "--run-id", "no-such-job")
        assert missing.returncode == 1
        assert "no job no-such-job found on localhost" in missing.stderr
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


def test_launch_runs_without_a_record_when_the_cache_is_not_writable():
    done = ddpkit("launch", "--nproc-per-node", "1", str(SCRIPTS / "echo_env.py"),
                  env={"DDPKIT_RUNS_DIR": "/proc/ddpkit-cannot-write-here", "ENV_NAMES": "RANK"})
    assert done.returncode == 0, done.stderr
    assert "ENV 0 RANK=0" in done.stdout
    assert "ddpkit: note: no run record: cannot write the run record in /proc/" in done.stderr


def test_a_job_of_another_user_is_reported_with_the_fix():
    """The helper runs as `nobody` (through a wrapper interpreter) and the job as root: the
    job cannot be looked into, and the output says what to do instead of "nothing found"."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        raise AssertionError("this test needs root and setpriv (util-linux)")
    base = tempfile.mkdtemp(prefix="ddpkit-nobody-", dir="/tmp")
    try:
        os.chmod(base, 0o777)
        wrapper = os.path.join(base, "python")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups "
                    "/usr/bin/python3 \"$@\"\n")
        os.chmod(wrapper, 0o755)
        worker = fake_worker("stacks-other-user")
        try:
            done = ddpkit("stacks", "-H", "localhost", "--python", wrapper, "--run-id",
                          "stacks-other-user", env={"XDG_CACHE_HOME": base})
        finally:
            worker.kill()
            worker.wait()
        assert done.returncode == 1
        assert "process(es) of other users could not be looked into" in done.stdout, done.stdout
        assert "run ddpkit stacks as that user or as root (sudo)" in done.stdout
        assert "no job stacks-other-user found on localhost" in done.stderr
    finally:
        shutil.rmtree(base, ignore_errors=True)
