"""Pure judging of flight-recorder summaries (troubleshoot/flight.py) and how HangWatch uses
them: the straggler by collective numbers, a desync by ops, progress that says "not hung"."""

from __future__ import annotations

import pytest

from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.stackdump import NodeStacks, ProcStack
from ddpkit.troubleshoot import hang
from ddpkit.troubleshoot.flight import (
    Entry,
    RankRecord,
    advancing,
    judge_flight,
    records_from,
)
from ddpkit.troubleshoot.stacks import StackReport


def ar(seq: int, line: int = 30, op: str = "gloo:all_reduce", size: int = 4, pg: str = "0"):
    return Entry(seq, op, pg, "scheduled", ((size,),), "train.py", line)


def rank(r: int, *entries: Entry, host: str = "node0") -> RankRecord:
    return RankRecord(r, host, tuple(entries), dumped=True)


LOOP = [ar(1), ar(2), ar(3)]

CASES = {
    "one rank behind": (
        [rank(0, *LOOP), rank(1, *LOOP[:2], host="node1"), rank(2, *LOOP)],
        ("rank 1 (node1)",), False,
        "rank 1 entered 2 collective(s), the others 3: they wait in all_reduce #3 at "
        "train.py:30; rank 1 never reached it"),
    "two ranks behind by different amounts": (
        [rank(0, *LOOP), rank(1, *LOOP[:1]), rank(2, *LOOP[:2]), rank(3, *LOOP)],
        ("rank 1 (node0)", "rank 2 (node0)"), False,
        "rank 1 entered 1 collective(s), the others 3"),
    "a rank with no collective at all (never joined the group)": (
        [rank(0, *LOOP), RankRecord(1, "node1", (), dumped=True), rank(2, *LOOP)],
        ("rank 1 (node1)",), False, "rank 1 entered 0 collective(s), the others 3"),
    "desync: same number, another op": (
        [rank(0, *LOOP), rank(1, ar(1), ar(2), ar(3, 44, "gloo:barrier")), rank(2, *LOOP)],
        ("rank 1 (node0)",), True,
        "desync at collective #3: ranks 0, 2: all_reduce at train.py:30 [4]; rank 1: barrier "
        "at train.py:44 [4]"),
    "desync: same op, other sizes": (
        [rank(0, *LOOP), rank(1, ar(1), ar(2), ar(3, size=8))],
        ("rank 0 (node0)", "rank 1 (node0)"), True, "desync at collective #3"),
    "everyone in the same collective: nobody named": (
        [rank(0, *LOOP), rank(1, *LOOP)], (), False, None),
    "no entries anywhere (no group yet)": (
        [RankRecord(0, "n", (), True), RankRecord(1, "n", (), True)], (), False, None),
    "another group's numbers do not count": (
        [rank(0, *LOOP, ar(9, pg="1")), rank(1, *LOOP)], (), False, None),
    "p2p entries are left out": (
        [rank(0, *LOOP, Entry(0, "gloo:send", "0", p2p=True)), rank(1, *LOOP)], (), False, None),
}


@pytest.mark.parametrize("name", list(CASES))
def test_judge_flight(name):
    records, stragglers, desync, line = CASES[name]
    got = judge_flight(records)
    assert got.stragglers == stragglers
    assert got.desync is desync
    if line is None:
        assert not got.lines and not got.verdict
    else:
        assert any(line in ln for ln in got.lines), got.lines
        assert got.verdict == "flight recorder: straggler: " + "; ".join(stragglers)


@pytest.mark.parametrize("ages,within,moving", [
    ([0.4, 0.5], 4.0, [0, 1]),
    ([9.0, 0.5], 4.0, [1]),
    ([9.0, 12.0], 4.0, []),
    ([None, None], 4.0, []),  # the script does not use ddpkit.runtime
])
def test_advancing(ages, within, moving):
    records = [RankRecord(i, "n", steps=None if a is None else 10, step_age_s=a)
               for i, a in enumerate(ages)]
    assert [r.rank for r in advancing(records, within)] == moving


def _watch(ranks: dict) -> dict:
    return {"asked": True, "ranks": ranks}


def _dump(*entries: Entry) -> dict:
    return {"entries": [{"seq": e.seq, "op": e.op, "pg_id": e.pg, "sizes": [list(s) for s in e.sizes],
                         "file": e.file, "line": e.line} for e in entries],
            "raw_b64": "AAEC"}


def test_records_from_nodes_first_seen_wins():
    nodes = [NodeStacks("node0", watch=_watch({"0": {"progress": {"steps": 5, "age_s": 1.0},
                                                      "dumps": {"fr_rank_": _dump(*LOOP)}}})),
             NodeStacks("node1", watch=_watch({"0": {"progress": None, "dumps": {}},
                                               "1": {"progress": None,
                                                     "dumps": {"fr_rank_": _dump(ar(1))}}}))]
    recs = records_from(nodes)
    assert [(r.rank, r.host, len(r.entries), r.steps) for r in recs] == \
        [(0, "node0", 3, 5), (1, "node1", 1, None)]


def test_flight_verdict_only_where_the_stacks_name_nobody():
    flight = judge_flight([rank(0, *LOOP), rank(1, *LOOP[:2], host="node1")])
    silent = StackReport(verdict="every rank waits in all_reduce at train.py:30; none is behind")
    merged = hang.with_flight(silent, flight)
    assert merged.stragglers == ("rank 1 (node1)",) and merged.verdict == flight.verdict
    assert merged.lines()[-2].startswith("! flight recorder: rank 1 entered 2")
    named = StackReport(verdict="straggler: rank 1 (node1); ...", stragglers=("rank 1 (node1)",))
    kept = hang.with_flight(named, flight)
    assert kept.verdict == named.verdict and kept.evidence


def test_hang_watch_steps_mean_not_hung_and_dumps_go_to_the_record(monkeypatch, tmp_path):
    from tests.unit.test_runs import make

    stepping = NodeStacks("node0", watch=_watch({
        "0": {"progress": {"steps": 7, "age_s": 0.5}, "dumps": {}}}))
    procs = tuple(ProcStack("node0", 100 + r, "worker", rank=r) for r in (0, 1))
    stuck = NodeStacks("node0", procs, watch=_watch({
        "0": {"progress": {"steps": 7, "age_s": 9.0}, "dumps": {"fr_rank_": _dump(*LOOP)}},
        "1": {"progress": {"steps": 6, "age_s": 9.5}, "dumps": {"fr_rank_": _dump(*LOOP[:2])}}}))
    samples, asked = [[stepping], [stuck]], []

    def take(*a, **k):
        asked.append(k["watch"])
        return samples.pop(0)

    monkeypatch.setattr(hang, "take_stacks", take)
    monkeypatch.setattr(hang, "fr_trace_available", lambda: False)
    said: list[str] = []
    rec = make(tmp_path, "ddpkit-cccc0002")
    watch = hang.HangWatch([Host("node0")], [False], SshOptions(), "python", "r", 2, rec,
                           say=said.append, hang_timeout=4.0)
    assert watch("hang") == 3.5 and "made a step 0 s ago" in said[0]  # again in 4 - 0.5 s
    assert watch("hang") is True
    assert asked[0]["recent_s"] == 4.0
    assert watch.report.stragglers == ("rank 1 (node0)",)
    assert watch.to_dict()["flight_recorder"]["stragglers"] == ["rank 1 (node0)"]
    watch.save(rec)
    assert (rec.dir / "fr" / "fr_rank_1").read_bytes() == b"\x00\x01\x02"
    assert "raw_b64" not in (rec.dir / "fr.json").read_text()


def test_py_spy_places_fill_in_the_line_of_the_collective_a_rank_waits_in():
    bare = [Entry(1, "gloo:all_reduce"), Entry(2, "gloo:all_reduce")]
    got = judge_flight([rank(0, *bare), rank(1, bare[0])], places={0: ("train.py", 88)})
    assert "they wait in all_reduce #2 at train.py:88; rank 1 never reached it" in got.lines[0]
    desync = judge_flight([rank(0, *bare), rank(1, bare[0], Entry(2, "gloo:barrier"))],
                          places={1: ("train.py", 90)})
    assert desync.lines[0] == "desync at collective #2: rank 0: all_reduce; rank 1: barrier at " \
        "train.py:90"


def _supervisor(hang_timeout=0.0, on_stall=None):
    import io

    from ddpkit.launch.output import Printer
    from ddpkit.launch.plan import LaunchOptions, NodeFacts, make_plan
    from ddpkit.launch.supervise import Supervisor

    plan = make_plan([Host("localhost", 1)], LaunchOptions(script="t.py"), {}, [NodeFacts()])
    return Supervisor(plan, SshOptions(), Printer(io.StringIO(), io.StringIO(), 8, None),
                      hang_timeout=hang_timeout, on_stall=on_stall)


def test_a_run_that_ended_well_during_its_stall_check_is_not_hung():
    """The verdict on a run that finished by itself is its exit codes: a stall check that was
    still under way (reason "hang", no teardown) does not make it HUNG."""
    sup = _supervisor(hang_timeout=5)
    sup.nodes[0].state, sup.reason = "ok", "hang"
    result = sup._result()
    assert result.reason == "" and result.exit_code == 0
    torn = _supervisor(hang_timeout=5)
    torn.nodes[0].state, torn.reason, torn.tearing_down_at = "stopped", "hang", 1.0
    assert torn._result().reason == "hang"


def test_a_rank_that_stepped_recently_is_checked_again_when_its_step_gets_old():
    """on_stall answers N (a rank stepped hang_timeout - N s ago): the next check comes after
    N s of further silence, not a whole hang timeout later; output resets that."""
    import threading
    import time

    sup = _supervisor(hang_timeout=30, on_stall=lambda why: 3.0)
    sup.nodes[0].state = "running"
    sup.reason = "hang"
    sup.stall_verdict = [3.0]
    done = threading.Thread(target=lambda: None)
    done.start()
    done.join()
    sup.stall = ("hang", time.monotonic() - 1, done)
    sup._check_stall()
    assert sup.reason == "" and sup.stall is None and sup.next_check_s == 3.0
    sup.last_output = time.monotonic() - 3.5
    sup._check_stall()
    assert sup.reason == "hang" and sup.stall is not None  # checked again after 3 s, not 30
    sup.stall[2].join()
    sup._handle(sup.nodes[0], "out", "[rank0]:epoch 2")
    assert sup.next_check_s is None


def test_a_rendezvous_every_node_joined_gets_one_look_more(monkeypatch, tmp_path):
    """Every node in torchrun's rendezvous, none missing: completing, slowly on a loaded
    machine (CI once judged a correct run HUNG there). One look more after RDZV_GRACE_S, then a
    hang. A node that never joined gets the next silence (it may be logging in), no grace."""
    import json
    from dataclasses import replace
    from pathlib import Path

    from tests.unit.test_runs import make

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "stacks" / "rendezvous.json"
    node = NodeStacks.from_dict(json.loads(fixture.read_text()))
    agent = replace(node.procs[0], nnodes="2")
    both = [replace(node, procs=(agent,)),
            replace(node, host="node1", procs=(replace(agent, host="node1"),))]
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: both)
    monkeypatch.setattr(hang, "fr_trace_available", lambda: False)
    said: list[str] = []
    hosts = [Host(node.host), Host("node1")]
    watch = hang.HangWatch(hosts, [True, False], SshOptions(), "python", "r", 2,
                           make(tmp_path, "ddpkit-cccc0003"), say=said.append, hang_timeout=4.0)
    assert watch("hang") == hang.RDZV_GRACE_S
    assert "every node is in torchrun's rendezvous" in said[0]
    assert watch("hang") is True and watch.report.rendezvous.startswith("rendezvous incomplete")
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: both[:1])  # node1 never joined
    lonely = hang.HangWatch(hosts, [True, False], SshOptions(), "python", "r", 2,
                            make(tmp_path, "ddpkit-cccc0004"), say=said.append, hang_timeout=4.0)
    assert lonely("hang") is False and "node1: no torchrun yet" in said[-1]
    assert lonely("hang") is True and lonely.report.stragglers == ("node1",)
