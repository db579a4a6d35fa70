"""The in-process watcher (nodeside/bootstrap.py) and the node side of a hang check
(nodeside/stackdump.py): progress files, dumps on request, small summaries. Real threads and
files; torch is stood in for by a module with the dumper's name."""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
import types

import pytest

from ddpkit.nodeside import bootstrap, stackdump


def wait_for(check, timeout: float = 5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError("not within %ss" % timeout)


def fake_torch(monkeypatch, dump: dict | Exception) -> None:
    def dumper(*args):
        if isinstance(dump, Exception):
            raise dump
        return pickle.dumps(dump)

    c10d = types.SimpleNamespace(_dump_fr_trace=dumper)
    torch = types.SimpleNamespace(_C=types.SimpleNamespace(_distributed_c10d=c10d))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", types.SimpleNamespace())


@pytest.fixture
def watcher(tmp_path):
    stop = threading.Event()
    t = threading.Thread(target=bootstrap.watch_loop, args=(str(tmp_path), "3", 0.02, stop),
                         daemon=True)
    yield t
    stop.set()
    t.join(timeout=2)


DUMP = {"version": "2.10", "pg_status": {"0": {"last_completed_collective": 1}}, "entries": [
    {"collective_seq_id": 1, "profiling_name": "gloo:all_reduce", "state": "scheduled",
     "process_group": ("0", "default_pg"), "pg_id": 0, "input_sizes": [[4]], "is_p2p": False},
    {"collective_seq_id": 2, "profiling_name": "gloo:barrier", "state": "scheduled",
     "process_group": ("0", "default_pg"), "pg_id": 0, "input_sizes": [], "is_p2p": False,
     "frames": [{"name": "barrier", "filename": "/x/site-packages/torch/distributed/c.py",
                 "line": 9}, {"name": "main", "filename": "/home/u/train.py", "line": 44}]}]}


def test_no_watch_dir_no_thread():
    assert bootstrap.start_watch({}) is None


def test_progress_is_written_when_the_count_changes(tmp_path, monkeypatch, watcher):
    runtime = types.SimpleNamespace(_steps=0)
    monkeypatch.setitem(sys.modules, "ddpkit.runtime", runtime)
    watcher.start()
    path = tmp_path / "progress_rank_3"
    first = wait_for(lambda: path.is_file() and path.read_text())
    assert first.split()[0] == "0" and abs(float(first.split()[1]) - time.time()) < 5
    runtime._steps = 7
    assert wait_for(lambda: path.read_text().startswith("7 "))


def test_a_script_without_the_runtime_writes_no_progress(tmp_path, monkeypatch, watcher):
    monkeypatch.delitem(sys.modules, "ddpkit.runtime", raising=False)
    watcher.start()
    time.sleep(0.2)
    assert not (tmp_path / "progress_rank_3").exists()


def test_a_request_gets_a_dump_and_an_old_request_does_not(tmp_path, monkeypatch, watcher):
    fake_torch(monkeypatch, DUMP)
    (tmp_path / "dump_request").write_text("old\n")  # older than the watcher: not for it
    watcher.start()
    time.sleep(0.2)
    assert not (tmp_path / "fr_rank_3.pkl").exists()
    time.sleep(0.05)
    (tmp_path / "dump_request").write_text("now\n")
    data = wait_for(lambda: (tmp_path / "fr_rank_3.pkl").is_file()
                    and (tmp_path / "fr_rank_3.pkl").read_bytes())
    assert pickle.loads(data) == DUMP


@pytest.mark.parametrize("torch_state", ["absent", "raises"])
def test_no_torch_or_a_failing_dumper_writes_nothing_and_keeps_going(
        tmp_path, monkeypatch, watcher, torch_state):
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    if torch_state == "raises":
        fake_torch(monkeypatch, RuntimeError("no recorder"))
    runtime = types.SimpleNamespace(_steps=1)
    monkeypatch.setitem(sys.modules, "ddpkit.runtime", runtime)
    watcher.start()
    time.sleep(0.05)
    (tmp_path / "dump_request").write_text("now\n")
    time.sleep(0.2)
    runtime._steps = 2  # the thread is still alive after the failed dump
    assert wait_for(lambda: (tmp_path / "progress_rank_3").read_text().startswith("2 "))
    assert not list(tmp_path.glob("fr_rank_*"))


def test_node_side_summary_is_small_and_names_the_users_line():
    got = stackdump.summarise(pickle.dumps(DUMP), {"keep": 20, "raw_max": 10})
    assert [(e["seq"], e["op"], e["pg_id"], e["file"], e["line"]) for e in got["entries"]] == \
        [(1, "gloo:all_reduce", "0", "", 0), (2, "gloo:barrier", "0", "train.py", 44)]
    assert "raw_b64" not in got and got["stack_traces"] is True


def test_node_side_refuses_a_dump_with_objects():
    got = stackdump.summarise(pickle.dumps({"entries": [threading.Event]}), {})
    assert got["error"].startswith("unreadable dump")


def test_node_side_gather_asks_waits_and_reads_progress(tmp_path):
    (tmp_path / "progress_rank_0").write_text("12 %f\n" % (time.time() - 30))
    folders = {0: str(tmp_path)}
    want = {"recent_s": 5, "fr_wait_s": 2, "keep": 20, "raw_max": 1 << 20}
    assert not stackdump.stepped_recently(folders, want)
    asked = stackdump.ask_dumps(folders)
    assert asked is not None and (tmp_path / "dump_request").is_file()

    def answer():  # what the rank's watcher does when it sees the request: write, then rename
        time.sleep(0.2)  # (a reader never sees half a dump; a plain write raced here under load)
        (tmp_path / "fr_rank_0.pkl.tmp").write_bytes(pickle.dumps(DUMP))
        os.replace(tmp_path / "fr_rank_0.pkl.tmp", tmp_path / "fr_rank_0.pkl")

    threading.Thread(target=answer).start()
    got = stackdump.gather(folders, want, asked)
    rank = got["ranks"]["0"]
    assert rank["progress"]["steps"] == 12 and rank["progress"]["age_s"] >= 29
    assert rank["dumps"]["fr_rank_"]["entries"][-1]["op"] == "gloo:barrier"
    assert rank["dumps"]["fr_rank_"]["raw_b64"] and got["waited_s"] < 2


def test_node_side_asks_for_nothing_while_a_rank_steps(tmp_path, monkeypatch):
    """No py-spy and no dumps for a run that is not hung: a stepping rank says so."""
    (tmp_path / "progress_rank_0").write_text("12 %f\n" % time.time())
    picked = [{"pid": 1, "role": "worker", "argv": ["python"],
               "env": {"RANK": "0", "LOCAL_RANK": "0", "DDPKIT_WATCH_DIR": str(tmp_path)}}]
    monkeypatch.setattr(stackdump, "scan", lambda run_id: ({}, 0))
    monkeypatch.setattr(stackdump, "select", lambda procs: picked)
    monkeypatch.setattr(stackdump, "dump", lambda *a: pytest.fail("py-spy was run"))
    got = stackdump.collect({"run_id": "r", "watch": {"recent_s": 5}})
    assert got["stepping"] is True and got["watch"]["ranks"]["0"]["progress"]["steps"] == 12
    assert not (tmp_path / "dump_request").exists()
