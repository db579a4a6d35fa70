"""Issue 11, as a new user meets it on one machine: torchrun's spellings and habits, ports,
dry runs without SSH, --no-python wrappers, bench refusals, help texts, the node guard's
command line. Real CLI runs (real torchrun, Gloo)."""

import glob
import json
import os
import signal
import socket
import sys

import pytest

from tests.conftest import ddpkit
from tests.launching import SCRIPTS, Running, wait_gone

RANK0 = str(SCRIPTS / "rank0_only.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bare_ddpkit_prints_usage_and_exits_2():
    done = ddpkit()
    assert done.returncode == 2
    assert "usage: ddpkit" in done.stderr and "launch" in done.stderr


def test_torchrun_spellings_run_and_silent_ranks_are_counted():
    done = ddpkit("launch", "--nproc_per_node", "2", "--max_restarts", "0", RANK0)
    assert done.returncode == 0, done.stderr
    assert "world=2" in done.stdout
    assert "OK: 1 node(s), 2 rank(s)" in done.stderr  # rank 1 printed nothing, and ran


def test_master_port_from_the_environment_is_the_rendezvous_port():
    with socket.socket() as held:  # another job holds the port: the run must not start
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        busy = ddpkit("launch", "--nproc-per-node", "2", RANK0, env={"MASTER_PORT": str(port)})
    assert busy.returncode == 1
    assert f"rendezvous port {port} (--port or MASTER_PORT) is not free" in busy.stderr
    port = free_port()
    done = ddpkit("launch", "--nproc-per-node", "2", RANK0, env={"MASTER_PORT": str(port)})
    assert done.returncode == 0, done.stderr
    assert "world=2" in done.stdout


def test_port_on_one_node_is_used_not_ignored():
    plan = json.loads(ddpkit("launch", "--dry-run", "--json", "--port", "29511", RANK0).stdout)
    argv = plan["nodes"][0]["argv"]
    assert "--standalone" not in argv and "127.0.0.1:29511" in argv
    free = json.loads(ddpkit("launch", "--dry-run", "--json", RANK0,
                             env={"MASTER_PORT": ""}).stdout)
    assert "--standalone" in free["nodes"][0]["argv"]  # none given: torchrun picks a free one


def test_per_node_torchrun_flags_get_the_ddpkit_command():
    done = ddpkit("launch", "--nnodes", "2", "--node_rank", "0", "--master_addr", "10.0.0.1",
                  "--master_port", "29501", "--nproc_per_node", "4", "train.py", "--lr", "1")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and "ddpkit starts every node from here" in lines[0]
    assert "ddpkit launch -H 10.0.0.1:4,node1:4 --port 29501" in lines[1]
    assert lines[1].endswith("train.py --lr 1")
    one = ddpkit("launch", "--standalone", "--nnodes", "1", "--dry-run", RANK0)
    assert one.returncode == 0, one.stderr  # what a one-node run does anyway: accepted


def test_nproc_per_node_words():
    done = ddpkit("launch", "--nproc-per-node", "cpu", "--dry-run", RANK0)
    assert done.returncode == 0, done.stderr
    assert f"--nproc-per-node {len(os.sched_getaffinity(0))} " in done.stdout
    if not glob.glob("/dev/nvidia[0-9]*"):
        gpu = ddpkit("launch", "--nproc-per-node", "gpu", RANK0)
        assert gpu.returncode == 2 and "has no NVIDIA GPU" in gpu.stderr


def test_no_python_runs_a_shell_wrapper(tmp_path):
    (tmp_path / "job.py").write_text("import os\nprint('WRAPPED', os.environ['RANK'])\n")
    wrapper = tmp_path / "run.sh"
    wrapper.write_text('#!/bin/sh\nexec "$TEST_PY" "$(dirname "$0")/job.py" "$@"\n')
    wrapper.chmod(0o755)
    done = ddpkit("launch", "--no-python", "--nproc-per-node", "2", "--env",
                  f"TEST_PY={sys.executable}", "./run.sh", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "WRAPPED 0" in done.stdout and "WRAPPED 1" in done.stdout
    bare = ddpkit("launch", "--no-python", "run.sh", cwd=str(tmp_path))
    assert bare.returncode == 2 and "write ./run.sh" in bare.stderr  # torchrun uses PATH


def test_dry_run_shows_the_plan_when_ssh_cannot_reach_the_nodes():
    # .invalid never resolves (RFC 6761): no traffic leaves the machine
    done = ddpkit("launch", "-H", "nohost-a.invalid,nohost-b.invalid:2", "--dry-run", RANK0)
    assert done.returncode == 1
    assert "# 2 node(s), world size 3" in done.stdout
    assert "'<address of nohost-a.invalid>:29500'" in done.stdout
    assert "nohost-b.invalid: host name does not resolve" in done.stderr
    assert "a launch would stop here" in done.stderr and "Traceback" not in done.stderr


def test_dry_run_without_preflight_plans_with_the_names_given():
    done = ddpkit("launch", "-H", "198.18.255.1,198.18.255.2", "--no-preflight", "--dry-run",
                  RANK0, env={"MASTER_PORT": ""})
    assert done.returncode == 0, done.stderr
    assert "rendezvous c10d at 198.18.255.1:29500" in done.stdout
    assert "no non-loopback" not in done.stdout + done.stderr


def test_a_one_node_failure_says_nothing_about_other_nodes():
    done = ddpkit("launch", "--nproc-per-node", "2", str(SCRIPTS / "fail_on_rank.py"),
                  env={"FAIL_RANK": "1"}, timeout=90)
    assert done.returncode == 1
    assert "FAILED: localhost failed first" in done.stderr
    assert "other nodes" not in done.stderr


def _cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_the_node_guard_has_a_short_command_line():
    run = Running(["launch", "--nproc-per-node", "1", str(SCRIPTS / "sleeper.py")])
    try:
        (pid,) = run.ready_pids(1)
        chain = [pid]
        while len(chain) < 6 and chain[-1] > 1:
            chain.append(_parent(chain[-1]))
        guards = [_cmdline(p) for p in chain if "ddpkit-guard" in _cmdline(p)]
        assert len(guards) == 1, [_cmdline(p) for p in chain]
        assert len(guards[0]) < 200 and "Node guard" not in guards[0]
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=30) == 130
        assert wait_gone([pid]) == []
    finally:
        run.kill()


def _torch_cuda() -> str:
    import importlib.util

    spec = importlib.util.find_spec("torch")
    text = open(os.path.join(os.path.dirname(spec.origin), "version.py")).read()
    return "" if "cuda: Optional[str] = None" in text or "\ncuda = None" in text else "cuda"


def test_bench_nccl_is_refused_up_front_without_cuda():
    if _torch_cuda() and glob.glob("/dev/nvidia[0-9]*"):
        pytest.fail("this test needs a CPU-only torch or a machine without GPUs")
    done = ddpkit("bench", "--backend", "nccl")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "_cuda_setDevice" not in done.stderr
    first = done.stderr.splitlines()[0]
    assert first.startswith("ddpkit: error: --backend nccl:")
    if not _torch_cuda():
        assert "is a CPU build" in first
        assert "download.pytorch.org/whl/cu" in done.stderr


def test_bench_explains_nccl_tests_thread_flags():
    done = ddpkit("bench", "-g", "2", "-t", "2")
    assert done.returncode == 2 and "one process per GPU" in done.stderr
    assert "-H node0:4,node1:4" in done.stderr


def test_bench_uses_the_current_collective_names():
    done = ddpkit("bench", "-g", "1", "-t", "1", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
                  "--collective", "all_gather,reduce_scatter", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "all_gather" in done.stdout and "reduce_scatter" in done.stdout
    assert "FutureWarning" not in done.stdout + done.stderr


def test_help_texts():
    launch = ddpkit("launch", "--help").stdout
    groups = launch.split("\n\n")
    safety = next(g for g in groups if g.startswith("preflight and teardown"))
    assert "--no-preflight" in safety and "--heartbeat-timeout" in safety
    output = next(g for g in groups if g.startswith("output"))
    assert "--no-preflight" not in output
    restarts = launch.split("--max-restarts N, --max_restarts N", 1)[1].split("\n  -")[0]
    assert "default 0" in restarts
    assert "$MASTER_PORT" in launch
    bench = " ".join(ddpkit("bench", "--help").stdout.split())
    assert "same defaults except -a" in bench and "nccl-tests' default is 1" in bench


def test_doctor_names_nccl_syntax_in_gloo_socket_ifname():
    done = ddpkit("doctor", "--json", env={"GLOO_SOCKET_IFNAME": "^docker0,lo"})
    check = next(c for c in json.loads(done.stdout)["checks"]
                 if c["id"] == "env.GLOO_SOCKET_IFNAME")
    assert "'^' syntax, which Gloo does not have" in check["summary"]
