"""`ddpkit launch` and `ddpkit demo` on this machine, with real torchrun and Gloo."""

import json
import os
import signal
import time

from tests.conftest import ddpkit
from tests.launching import SCRIPTS, Running, wait_gone


def test_local_run_labels_every_line_with_host_and_rank(tmp_path):
    done = ddpkit("launch", "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"),
                  str(SCRIPTS / "train_ddp.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    params = [ln for ln in done.stdout.splitlines() if "PARAMS" in ln]
    assert len(params) == 2
    assert any(ln.startswith("localhost:0 ") for ln in params)
    assert any(ln.startswith("localhost:1 ") for ln in params)
    sums = {ln.split("sum=")[1] for ln in params}
    assert len(sums) == 1, "ranks disagree"
    assert (tmp_path / "logs" / "rank0.log").read_text().count("PARAMS") == 1
    assert (tmp_path / "logs" / "rank1.log").read_text().count("PARAMS") == 1
    assert "OK: 1 node(s)" in done.stderr


def test_failing_rank_fails_the_run_and_names_it():
    done = ddpkit("launch", "--nproc-per-node", "2", str(SCRIPTS / "fail_on_rank.py"),
                  env={"FAIL_RANK": "1"}, timeout=60)
    assert done.returncode == 1
    assert "RuntimeError: planned failure on rank 1" in done.stderr
    assert "FAILED: localhost failed first" in done.stderr


def test_missing_script_is_a_usage_error():
    done = ddpkit("launch", "no_such_script.py")
    assert done.returncode == 2
    assert "localhost: script no_such_script.py not found" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_flags_are_usage_errors():
    for args in (["launch", "--nproc-per-node", "0", "x.py"], ["launch", "--port", "99999", "x.py"],
                 ["launch", "-H", "a:0", "x.py"], ["launch", "--env", "NOEQ", "x.py"],
                 ["launch", "--bogus", "x.py"]):
        done = ddpkit(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr and "error:" in done.stderr


def test_script_options_are_not_taken_by_the_launcher():
    done = ddpkit("launch", "--dry-run", "train.py", "--max", "5", "--port", "1")
    assert done.returncode in (0, 2)  # train.py does not exist here: the probe says so (exit 2)
    if done.returncode == 0:
        assert " train.py --max 5 --port 1" in done.stdout.split(" -- ", 1)[1]


def test_dry_run_prints_a_paste_ready_command(tmp_path):
    script = tmp_path / "t.py"
    script.write_text("print('hi')\n")
    done = ddpkit("launch", "--dry-run", "--nproc-per-node", "3", "--env", "HF_TOKEN=hf_abc",
                  "-x", "NCCL_DEBUG=INFO", str(script), "--api-key", "k123", cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "--standalone" in out and "--nproc-per-node 3" in out
    assert "NCCL_DEBUG=INFO" in out and f"cd {tmp_path}" in out
    assert "hf_abc" not in out and "k123" not in out and "'HF_TOKEN=****'" in out
    js = json.loads(ddpkit("launch", "--dry-run", "--json", str(script), cwd=str(tmp_path)).stdout)
    assert js["nodes"][0]["local"] is True and js["world_size"] == 1


def test_sigint_tears_everything_down():
    run = Running(["launch", "--nproc-per-node", "2", str(SCRIPTS / "sleeper.py")])
    try:
        pids = run.ready_pids(2)
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=30) == 130
        assert wait_gone(pids) == []
        assert "STOPPED by SIGINT" in run.output
    finally:
        run.kill()


def test_sigkilled_launcher_leaves_no_orphans():
    run = Running(["launch", "--nproc-per-node", "2", str(SCRIPTS / "sleeper.py")])
    try:
        pids = run.ready_pids(2)
        os.kill(run.proc.pid, signal.SIGKILL)
        run.wait(timeout=10)
        assert wait_gone(pids) == [], "workers outlived a SIGKILLed launcher"
    finally:
        run.kill()


def test_demo_passes_on_this_machine():
    started = time.monotonic()
    done = ddpkit("demo", "--json", timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["passed"] and len(report["ranks"]) == 2
    assert all(r["backend"] == "gloo" and r["params_identical"] for r in report["ranks"])
    assert time.monotonic() - started < 120


def test_a_second_ctrl_c_kills_at_once_and_still_leaves_nothing():
    run = Running(["launch", "--nproc-per-node", "2", "--grace", "30", str(SCRIPTS / "sleeper.py")],
                  env={"IGNORE_TERM": "1"})
    try:
        pids = run.ready_pids(2)
        run.proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        run.proc.send_signal(signal.SIGINT)  # impatient user: no 30 s grace this time
        started = time.monotonic()
        assert run.wait(timeout=30) == 130
        assert time.monotonic() - started < 15
        assert wait_gone(pids) == [], "workers survived the hard kill"
    finally:
        run.kill()
