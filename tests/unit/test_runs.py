"""Run records (launch/runs.py): layout, listing, lookup, pruning; the hang watch's decision
between "hung" and "busy"; the flight-recorder variables --hang-timeout sets."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from ddpkit.errors import UsageError
from ddpkit.launch import runs
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.stackdump import NodeStacks
from ddpkit.troubleshoot import hang

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"


def make(root: Path, run_id: str, log_dir: str | None = None) -> runs.RunRecord:
    return runs.RunRecord.create(run_id=run_id, hosts=[{"name": "node0"}, {"name": "node1"}],
                                 ssh={"config": None}, python="/usr/bin/python3",
                                 argv=["-H", "node0,node1", "train.py"],
                                 plan={"world_size": 2}, facts=[], log_dir=log_dir, root=root)


def test_default_location_follows_xdg_and_the_override():
    assert runs.runs_root({"DDPKIT_RUNS_DIR": "/x/runs"}) == Path("/x/runs")
    assert runs.runs_root({"XDG_CACHE_HOME": "/c"}) == Path("/c/ddpkit/runs")
    assert str(runs.runs_root({})).endswith(".cache/ddpkit/runs")


def test_record_lifecycle_and_lookup(tmp_path):
    rec = make(tmp_path, "ddpkit-aaaa0001")
    assert {p.name for p in rec.dir.iterdir()} == {"record.json", "plan.json", "facts.json"}
    info = runs.find_run(None, tmp_path)
    assert info.state == "running" and info.hosts == ("node0", "node1")
    rec.finish(state="hung", exit_code=1, verdict="straggler: rank 1", summary={"x": 1})
    info = runs.find_run("ddpkit-aaaa0001", tmp_path)
    assert info.state == "hung" and info.exit_code == 1 and info.duration_s is not None
    assert json.loads((rec.dir / "summary.json").read_text()) == {"x": 1}
    assert runs.find_run(rec.dir.name, tmp_path).dir == rec.dir
    with pytest.raises(UsageError, match="no run record 'nope'"):
        runs.find_run("nope", tmp_path)


def test_a_running_record_whose_launcher_died_is_lost(tmp_path):
    rec = make(tmp_path, "ddpkit-aaaa0002")
    rec.data["launcher_pid"] = 2 ** 22 + 12345  # beyond pid_max: never a live process
    rec.save()
    assert runs.find_run(None, tmp_path).state == "lost"


def test_log_dir_is_the_record_and_pruning_never_deletes_it(tmp_path):
    mine = tmp_path / "mylogs"
    rec = make(tmp_path / "runs", "ddpkit-aaaa0003", log_dir=str(mine))
    assert rec.dir == mine.resolve() and (mine / "record.json").is_file()
    rec.finish(state="ok", exit_code=0, verdict="ok", summary={})
    assert runs.list_runs(tmp_path / "runs")[0].dir == mine.resolve()
    link = next(iter(os.listdir(tmp_path / "runs")))
    assert runs.prune(tmp_path / "runs", keep=0) == [link]
    assert not os.listdir(tmp_path / "runs") and (mine / "record.json").is_file()


def test_prune_by_count_and_size_keeps_running_records(tmp_path):
    recs = []
    for i in range(4):
        rec = make(tmp_path, f"ddpkit-bbbb000{i}")
        rec.data["started"] = 1000.0 + i  # oldest first
        rec.save()
        (rec.dir / "rank0.log").write_text("x" * 10_000)
        recs.append(rec)
    for rec in recs[1:]:
        rec.finish(state="ok", exit_code=0, verdict="ok", summary={})
    # recs[0] is the oldest but still running: never removed
    removed = runs.prune(tmp_path, keep=2, max_bytes=10 ** 9)
    assert removed == [recs[1].dir.name]
    removed = runs.prune(tmp_path, keep=10, max_bytes=15_000)
    assert removed == [recs[2].dir.name]
    assert [i.run_id for i in runs.list_runs(tmp_path)] == ["ddpkit-bbbb0003", "ddpkit-bbbb0000"]


@pytest.mark.parametrize("text,want", [("500M", 500 << 20), ("2G", 2 << 30), ("1024", 1024),
                                       ("10kb", 10 << 10)])
def test_parse_size(text, want):
    assert runs.parse_size(text) == want


def test_parse_size_refuses_words():
    with pytest.raises(UsageError):
        runs.parse_size("lots")


@pytest.mark.parametrize("version,environ,names", [
    ("2.13.0+cpu", {}, ["TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                        "TORCH_FR_DUMP_TEMP_FILE", "DDPKIT_WATCH_DIR"]),
    ("2.4.1", {}, ["TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                   "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "DDPKIT_WATCH_DIR"]),
    # the user's own setting wins, in either spelling
    ("2.13.0", {"TORCH_NCCL_TRACE_BUFFER_SIZE": "5", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
                "DDPKIT_WATCH_DIR": "/mine"},
     ["TORCH_FR_DUMP_TEMP_FILE"]),
])
def test_flight_recorder_variables(version, environ, names):
    pairs = hang.flight_recorder_env("ddpkit-x", environ, version)
    assert [k for k, _ in pairs] == names
    assert all(v == "/tmp/ddpkit-fr-ddpkit-x/nccl_trace_rank_" for k, v in pairs
               if k.endswith("FILE"))


def _node(name: str, active: bool) -> NodeStacks:
    node = NodeStacks.from_dict(json.loads((FIX / f"{name}.json").read_text()))
    procs = tuple(replace(p, threads=tuple({**t, "active": active} for t in p.threads))
                  for p in node.procs)
    return replace(node, procs=procs)


def test_hang_watch_waits_while_a_rank_computes_somewhere_new(monkeypatch, tmp_path):
    samples = [[_node("sleep", True)], [_node("desync", True)], [_node("desync", True)]]
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: samples.pop(0))
    said: list[str] = []
    rec = make(tmp_path, "ddpkit-cccc0001")
    watch = hang.HangWatch([Host("localhost")], [True], SshOptions(), "python", "r", 3, rec,
                           say=said.append)
    assert watch("hang") is False and "not hung" in said[0]  # rank 1 busy in evaluate()
    # desync fixture: every rank waits in a collective, so nobody counts as busy: hung
    assert watch("hang") is True
    assert watch.report is not None and watch.report.stragglers == ("rank 1 (localhost)",)
    watch.save(rec)
    assert (rec.dir / "stacks.json").is_file() and "barrier" in (rec.dir / "stacks.txt").read_text()


def test_hang_watch_calls_a_rank_busy_twice_at_the_same_place_hung(monkeypatch):
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: [_node("sleep", True)])
    watch = hang.HangWatch([Host("localhost")], [True], SshOptions(), "python", "r", 3)
    assert watch("hang") is False
    assert watch("hang") is True  # same place again: a spin-wait, not progress


def test_ctrl_c_always_tears_down(monkeypatch):
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: [_node("sleep", True)])
    watch = hang.HangWatch([Host("localhost")], [True], SshOptions(), "python", "r", 3)
    assert watch("SIGINT") is True and watch.to_dict()["why"] == "SIGINT"


def test_a_node_without_torchrun_gets_one_more_check(monkeypatch):
    """Two nodes wait in the rendezvous and node2 has no process yet: maybe it is still
    logging in, so only a second identical look calls it a hang."""
    rdzv = _node("rendezvous", False)
    nodes = [rdzv, replace(rdzv, host="node1", procs=tuple(replace(p, host="node1")
                                                        for p in rdzv.procs)),
             NodeStacks("node2")]
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: nodes)
    watch = hang.HangWatch([Host("localhost"), Host("node1"), Host("node2")], [True] * 3,
                           SshOptions(), "python", "r", 3)
    assert watch("hang") is False
    assert watch("hang") is True
    assert "never joined: node2" in watch.report.rendezvous


def test_busy_in_the_same_innermost_frame_but_a_new_stack_is_progress(monkeypatch):
    """Importing spends its time in one frozen function; what changes is the stack above."""
    first = _node("sleep", True)

    def moved(p):
        main = next(t for t in p.threads if t["os_thread_id"] == p.pid)
        frames = main["frames"][:-1] + [{**main["frames"][-1], "line": 99}]
        return replace(p, threads=({**main, "frames": frames},))

    second = replace(first, procs=tuple(moved(p) for p in first.procs))
    samples = [[first], [second], [second]]
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: samples.pop(0))
    watch = hang.HangWatch([Host("localhost")], [True], SshOptions(), "python", "r", 3)
    assert [watch("hang"), watch("hang"), watch("hang")] == [False, False, True]
