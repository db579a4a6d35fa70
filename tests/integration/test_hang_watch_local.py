"""`launch --hang-timeout` on this machine with real torchrun and real Gloo: the watcher thread
in every worker serves flight-recorder dumps while the main thread is blocked in a hung
collective, and step counts keep a silent but stepping run alive."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from tests.launching import SCRIPTS


def launch(tmp_path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "DDPKIT_RUNS_DIR": str(tmp_path / "runs"), **(env or {})}
    return subprocess.run([sys.executable, "-m", "ddpkit", "launch", *args], env=full,
                          capture_output=True, text=True, timeout=180)


def hung_run(tmp_path, mode: str) -> str:
    """Three ranks on one node, rank 1 misbehaving (HANG_MODE), --hang-timeout 4: the output."""
    done = launch(tmp_path, "--nproc-per-node", "3", "--hang-timeout", "4",
                  "--env", f"HANG_MODE={mode}", str(SCRIPTS / "hang.py"))
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    return out


def record_of(tmp_path):
    (run,) = list((tmp_path / "runs").iterdir())
    return run


def test_hung_collective_gets_flight_recorder_dumps_in_the_record(tmp_path):
    """Rank 1 sleeps; ranks 0 and 2 are blocked in all_reduce #3 when the dumps are asked
    for: their watcher threads still write them (the Gloo wait releases the GIL)."""
    out = hung_run(tmp_path, "sleep")
    # "at hang.py:40" when the dumps with stack traces came within FR_WAIT_S (a busy machine
    # symbolizes the first one slowly: then the quick dumps without them are judged)
    assert re.search(r"flight recorder: rank 1 entered 2 collective\(s\), the others 3: they "
                     r"wait in all_reduce #3( at hang\.py:40)?; rank 1 never reached it", out), out
    # the launch's own diagnosis of the hang: the straggler its stacks named
    assert "diagnosis: [nccl_timeout_or_desync] the stacks taken during the hang: straggler: " \
           "rank 1 (localhost)" in " ".join(out.split()), out
    # torchrun's 25-line traceback from our own SIGTERM is one line on the console, whole in
    # the record
    assert "SignalException" not in out and "Traceback" not in out, out
    assert "torchrun stopped on the teardown's signal 15 (its traceback is in localhost.log" in out
    run = record_of(tmp_path)
    assert "SignalException: Process" in (run / "localhost.log").read_text()
    fr = json.loads((run / "fr.json").read_text())
    for r in ("0", "2"):  # blocked in the collective when they dumped
        dump = fr["ranks"][r]["dumps"]["fr_rank_"]
        entries = dump["entries"]
        assert entries[-1]["seq"] == 3 and entries[-1]["op"] == "gloo:all_reduce"
        if dump["stack_traces"]:
            assert (entries[-1]["file"], entries[-1]["line"]) == ("hang.py", 40)
    assert fr["judged"]["stragglers"] == ["rank 1 (localhost)"]
    assert sorted(os.listdir(run / "fr")) == ["fr_rank_0", "fr_rank_1", "fr_rank_2"]
    assert (run / "fr_trace.txt").is_file()  # torch's analyser ran (its verdict is its own)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stacks"]["flight_recorder"]["stragglers"] == ["rank 1 (localhost)"]
    # the run record ended "hung": diagnose reads it as a hang and names the straggler first
    done = subprocess.run([sys.executable, "-m", "ddpkit", "diagnose", str(run), "--json"],
                          capture_output=True, text=True, timeout=60)
    report = json.loads(done.stdout)
    assert done.returncode == 0 and report["hung"] is True, done.stdout
    top = report["findings"][0]
    assert top["id"] == "hang-stacks-straggler" and top["category"] == "nccl_timeout_or_desync"
    assert top["evidence"]["stragglers"] == ["rank 1 (localhost)"], top


def test_desync_is_named_with_flight_recorder_evidence(tmp_path):
    out = hung_run(tmp_path, "desync")
    assert re.search(r"flight recorder: desync at collective #6: ranks 0, 2: all_reduce"
                     r"( at hang\.py:40)? \[4\]; rank 1: barrier", out), out
    assert "straggler: rank 1 (localhost)" in out


def test_silent_run_that_steps_is_not_killed(tmp_path):
    """No line for ~8 s with --hang-timeout 3, steps counted by ddpkit.step(): not hung."""
    done = launch(tmp_path, "--nproc-per-node", "2", "--hang-timeout", "3",
                  "--env", "SILENT_S=8", str(SCRIPTS / "silent_steps.py"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "but not hung: ranks 0-1 made a step" in out and "HUNG" not in out
    assert out.count("DONE rank=") == 2
