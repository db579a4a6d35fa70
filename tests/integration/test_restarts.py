"""--max-restarts on one node ends: every attempt failing gives up after N+1 attempts, a
failure followed by a good attempt resumes. (torch 2.13's shared rendezvous store made the
third attempt hang forever; ddpkit gives the workers a store of their own.)"""

import re

from tests.conftest import ROOT, ddpkit
from tests.launching import SCRIPTS


def test_failing_every_attempt_on_one_node_ends_after_all_attempts():
    done = ddpkit("launch", "--nproc-per-node", "2", "--max-restarts", "2",
                  str(SCRIPTS / "fail_on_rank.py"), env={"FAIL_AFTER": "0.2"}, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    raised = re.findall(r"localhost:1\s+\| RuntimeError: planned failure on rank 1", out)
    assert len(raised) == 3, out[-3000:]  # the first attempt and 2 restarts
    assert len(re.findall(r"READY rank=1 ", out)) == 3
    assert "connectFullMesh" not in out


def test_one_failure_then_a_good_attempt_resumes_on_one_node(tmp_path):
    done = ddpkit("launch", "--nproc-per-node", "2", "--max-restarts", "1", "--env",
                  "CRASH_AT=1:5:1", str(ROOT / "examples" / "ddp_runtime.py"), "--ckpt",
                  str(tmp_path / "ckpt.pt"), timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "exitcode: 17" in out  # rank 1 did die in epoch 1
    assert done.stdout.count("epoch 0 loss") == 1 and done.stdout.count("epoch 1 loss") == 1
    results = set(re.findall(r"RESULT rank=\d+ params=(\S+)", done.stdout))
    assert len(results) == 1, done.stdout
