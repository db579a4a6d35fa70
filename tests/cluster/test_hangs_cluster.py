"""Hangs on the 3-node virtual cluster: `launch --hang-timeout` names the straggler within
hang-timeout + 15 s and leaves nothing behind; `ddpkit stacks` finds a running launch through
its run record, or any torchrun job with -H (a wrong --nnodes)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ddpkit
from tests.launching import SCRIPTS, Running

HANG_TIMEOUT = 4  # short on purpose; the README explains the default (off)
# any line a node printed (a worker's or its torchrun's): the silence starts after the last one
NODE_LINE = re.compile(r"^node\d:[-\d]+ +\| ")


class Timed(Running):
    """Running, with the arrival time of every line."""

    def _read(self) -> None:
        self.stamps: list[tuple[float, str]] = []
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stamps.append((time.monotonic(), line.rstrip("\n")))
            self.lines.append(line.rstrip("\n"))

    def silence_to(self, then: str) -> float:
        """From the last line a node printed before the first line containing `then` (the
        start of the silence: a hang prints nothing, so that is when it can first be seen)
        to that line."""
        named = min(t for t, ln in self.stamps if then in ln)
        last = max(t for t, ln in self.stamps if t <= named and NODE_LINE.search(ln))
        return named - last


@pytest.fixture(autouse=True)
def no_leftovers_after(vcluster):
    yield
    assert vcluster.wait_no_leftovers(15) == {}, "processes of a run outlived it"


def start(vc, mode: str, port: int, steps: int = 6, runs=None) -> Timed:
    script = ["--env", "SILENT_S=14", str(SCRIPTS / "silent_steps.py")] if mode == "silent" \
        else ["--env", f"HANG_MODE={mode}", "--env", f"HANG_STEPS={steps}",
              str(SCRIPTS / "hang.py")]
    return Timed(["launch", "--ssh-config", str(vc.ssh_config), "-H", vc.hosts_spec(1),
                  "--port", str(port), "--hang-timeout", str(HANG_TIMEOUT), *script],
                 env={"DDPKIT_RUNS_DIR": str(runs / mode)} if runs else None)


def host_of_rank(out: str, rank: int) -> str:
    found = re.search(rf"^(node\d):{rank} +\| READY rank={rank}", out, re.M)
    assert found, f"rank {rank} never printed READY:\n{out}"
    return found.group(1)


# the flight recorder's evidence (Gloo collectives are recorded too, torch 2.13)
FLIGHT = {
    "sleep": r"! flight recorder: rank 1 entered 2 collective\(s\), the others 3: they wait in "
             r"all_reduce #3( at hang\.py:\d+)?; rank 1 never reached it",
    "desync": r"! flight recorder: desync at collective #6: ranks 0, 2: all_reduce"
              r"( at hang\.py:\d+)? \[4\]; rank 1: barrier",
}
EXPECT = {
    "sleep": r"evaluate\(\) at hang\.py:\d+, never reached the all_reduce",
    "desync": r"barrier at hang\.py:\d+, while the others wait in all_reduce at hang\.py:\d+: "
              r"the ranks call different collectives \(a desync",
    "noinit": r"module code at hang\.py:\d+, never reached the init_process_group",
}


def test_hangs_are_named_within_hang_timeout_plus_15s(vcluster, tmp_path):
    """Three hung runs, a healthy one with a slow rank and a silent one that steps, side by
    side on the cluster (each on its own rendezvous port): CI time is one run's, not five."""
    runs = {mode: start(vcluster, mode, 29610 + 10 * i, runs=tmp_path)
            for i, mode in enumerate(EXPECT)}
    runs["slow"] = start(vcluster, "slow", 29650, steps=4)
    runs["silent"] = start(vcluster, "silent", 29660, runs=tmp_path)
    try:
        for run in runs.values():
            run.wait(timeout=180)
    finally:
        for run in runs.values():
            run.kill()
    for mode, odd_line in EXPECT.items():
        run, out = runs[mode], runs[mode].output
        assert run.proc.returncode == 1, f"{mode}:\n{out}"
        host = host_of_rank(out, 1)
        assert re.search(rf"! rank 1 \({host}\): {odd_line}", out), f"{mode}:\n{out}"
        assert f"straggler: rank 1 ({host})" in out, f"{mode}:\n{out}"
        assert "HUNG:" in out and "got signal" not in out.split("ddpkit launch: summary")[-1]
        assert "SignalException" not in out, f"{mode}:\n{out}"  # torchrun's, one line each
        # named as the teardown starts, not only in the summary once every node has stopped
        assert re.search(rf"ddpkit: HUNG, tearing every node down; straggler: rank 1 \({host}\)"
                         r"(.|\n)*ddpkit launch: summary", out), f"{mode}:\n{out}"
        took = run.silence_to("straggler:")
        assert took <= HANG_TIMEOUT + 15, f"{mode}: named {took:.1f} s after the last output:\n{out}"
        if mode in FLIGHT:
            assert re.search(FLIGHT[mode], out), f"{mode}:\n{out}"
        (rec,) = (tmp_path / mode).iterdir()
        fr = json.loads((rec / "fr.json").read_text())
        assert sorted(fr["ranks"]) == ["0", "1", "2"], fr
        if mode in FLIGHT:  # ranks blocked in a collective still dumped (watcher thread)
            assert fr["judged"]["stragglers"] == [f"rank 1 ({host})"], fr["judged"]
            assert sorted(os.listdir(rec / "fr")) == ["fr_rank_0", "fr_rank_1", "fr_rank_2"]
    # silent for 14 s (> HANG_TIMEOUT) but stepping with ddpkit.step(): left alone
    silent = runs["silent"]
    assert silent.proc.returncode == 0, silent.output
    assert "but not hung: ranks 0-2 made a step" in silent.output, silent.output
    assert silent.output.count("DONE rank=") == 3 and "HUNG" not in silent.output
    # rank 1 takes 1.5 s more per step than the others: silent gaps, but no hang
    slow = runs["slow"]
    assert slow.proc.returncode == 0, slow.output
    assert slow.output.count("DONE rank=") == 3 and "HUNG" not in slow.output


def test_stacks_of_a_running_launch_and_ctrl_c_on_a_silent_run(vcluster, tmp_path):
    env = {"DDPKIT_RUNS_DIR": str(tmp_path)}
    run = Running(["launch", "--ssh-config", str(vcluster.ssh_config), "-H",
                   vcluster.hosts_spec(1), str(SCRIPTS / "sleeper.py")], env=env)
    where = "ranks 0-2 (node0, node1, node2): module code at sleeper.py:13"
    try:
        run.ready_pids(3, timeout=90)
        running = json.loads(ddpkit("runs", "--json", env=env).stdout)["runs"]
        assert [r["state"] for r in running] == ["running"]
        done = ddpkit("stacks", env=env)  # the running launch, found through its record
        assert done.returncode == 0, done.stderr
        assert where in done.stdout and "3 node(s), 3 rank(s)" in done.stdout
        time.sleep(2)  # silent for longer than SILENT_S
        run.proc.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        run.kill()
    out = run.output
    assert "STOPPED by SIGINT" in out
    assert "interrupted (SIGINT) on a silent run; where every rank was:" in out and where in out
    # the user's own stop after a few silent seconds is not a verdict: no diagnosis
    assert "diagnosis:" not in out, out
    assert "got signal" not in out.split("ddpkit launch: summary")[-1]
    (rec,) = json.loads(ddpkit("runs", "--json", env=env).stdout)["runs"]
    assert rec["state"] == "interrupted" and rec["exit_code"] == 130
    assert rec["hosts"] == ["node0", "node1", "node2"]
    files = set(os.listdir(rec["dir"]))
    assert {"record.json", "plan.json", "facts.json", "summary.json", "stacks.json",
            "stacks.txt", "rank0.log", "rank1.log", "rank2.log"} <= files, files
    saved = ddpkit("stacks", "--last", env=env)
    assert saved.returncode == 0 and where in saved.stdout


def test_wrong_nnodes_in_a_plain_torchrun_job(vcluster):
    """torchrun started by hand on the 3 nodes with --nnodes 4 waits in the rendezvous
    forever; `ddpkit stacks -H` says so."""
    rid = "wrong-nnodes-test"
    master = vcluster.nodes[0].ip
    procs = []
    for node in vcluster.nodes:
        enter = ["nsenter", "-t", str(node.sshd.pid), "-n", "-m", "-u", "--"]
        procs.append(subprocess.Popen(
            enter + [sys.executable, "-m", "torch.distributed.run", "--nnodes", "4",
                     "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", f"{master}:29655", "--rdzv-id", rid,
                     "--local-addr", node.ip, str(SCRIPTS / "sleeper.py")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    try:
        # until every node's torchrun has reached the rendezvous (a slow start on a loaded
        # machine first shows "never joined: node1", which is right at that moment)
        want = "rendezvous incomplete: node0, node1, node2 wait(s) for the other nodes"
        deadline, out = time.monotonic() + 60, ""
        while time.monotonic() < deadline and want not in out:
            time.sleep(1)
            done = ddpkit("stacks", "--ssh-config", str(vcluster.ssh_config), "-H",
                          vcluster.hosts_spec(1), "--run-id", rid)
            out = done.stdout + done.stderr
        assert want in out
        assert "torchrun --nnodes 4 but only 3 node(s) run it" in out
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


