"""Judging stacks: real py-spy dumps of hung Gloo jobs (tests/scripts/hang.py, taken on this
machine: tests/fixtures/stacks) grouped and the straggler named; fixes for attach failures."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ddpkit.launch.stackdump import NodeStacks
from ddpkit.troubleshoot.stacks import attach_fix, busy, judge, ranks_label

DENIED = ("Permission Denied: Try running again with elevated permissions by going "
          "'sudo env \"PATH=$PATH\" !!'")
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "stacks"


def load(name: str) -> NodeStacks:
    return NodeStacks.from_dict(json.loads((FIX / f"{name}.json").read_text()))


@pytest.mark.parametrize("ranks,label", [
    ((0, 1, 2, 4, 5, 6, 7), "0-2, 4-7"), ((3,), "3"), ((0, 2), "0, 2"), ((5, 1, 2), "1-2, 5"),
    ((), ""),
])
def test_ranks_label(ranks, label):
    assert ranks_label(ranks) == label


def test_rank_that_sleeps_in_its_loop_is_the_straggler():
    rep = judge([load("sleep")])
    assert rep.stragglers == ("rank 1 (localhost)",)
    odd = [g for g in rep.groups if g.odd]
    assert len(odd) == 1 and odd[0].ranks == (1,)
    assert odd[0].place.text == "evaluate() at hang.py:21"
    assert odd[0].note == "never reached the all_reduce"
    assert "ranks 0, 2 wait in all_reduce at hang.py:37" in rep.verdict
    assert "! rank 1 (localhost): evaluate() at hang.py:21, never reached the all_reduce" \
        in rep.lines()


def test_rank_that_skipped_an_all_reduce_is_named_as_a_desync():
    rep = judge([load("desync")])
    odd = [g for g in rep.groups if g.odd]
    assert [g.ranks for g in odd] == [(1,)]
    assert odd[0].place.text == "barrier at hang.py:40"
    assert "desync" in odd[0].note and "all_reduce at hang.py:37" in odd[0].note


def test_rank_that_never_calls_init_process_group():
    rep = judge([load("noinit")])
    crowd = [g for g in rep.groups if not g.odd][0]
    assert crowd.ranks == (0, 2) and crowd.place.op == "init_process_group"
    odd = [g for g in rep.groups if g.odd][0]
    assert odd.ranks == (1,) and odd.note == "never reached the init_process_group"


def test_rendezvous_names_the_nodes_that_never_joined():
    rep = judge([load("rendezvous")], hosts=["localhost", "node1"])
    assert rep.rendezvous.startswith("rendezvous incomplete: localhost wait(s)")
    assert "never joined: node1" in rep.rendezvous
    assert rep.stragglers == ("node1",)


def test_wrong_nnodes_is_named_when_every_node_waits():
    node = load("rendezvous")
    agent = replace(node.procs[0], nnodes="4")
    rep = judge([replace(node, procs=(agent,)), replace(node, host="node1",
                 procs=(replace(agent, host="node1"),))])
    assert "never joined" not in rep.rendezvous
    assert "torchrun --nnodes 4 but only 2 node(s) run it" in rep.rendezvous


def test_a_rank_with_no_process_is_named():
    node = load("desync")
    rest = replace(node, procs=tuple(p for p in node.procs if p.rank != 2))
    rep = judge([rest], world_size=3)
    assert rep.missing_ranks == (2,)
    assert "rank 2 (no process found)" in rep.stragglers


def test_all_ranks_in_the_same_collective_names_nobody():
    node = load("sleep")
    waiting = replace(node, procs=tuple(p for p in node.procs if p.rank != 1))
    assert judge([waiting]).stragglers == ("rank 1 (no process found)",)  # world size 3
    renumbered = tuple(replace(p, rank=min(p.rank, 1), world_size=2) for p in waiting.procs)
    rep = judge([replace(waiting, procs=renumbered)])
    assert not rep.stragglers and "none is behind" in rep.verdict


def test_busy_only_when_a_main_thread_computes_outside_a_collective():
    node = load("sleep")
    assert busy([node]) == ()  # a hang: every main thread idle
    hot = []
    for p in node.procs:
        threads = tuple({**t, "active": True} for t in p.threads)
        hot.append(replace(p, threads=threads))
    # rank 1 computes in evaluate(); ranks 0 and 2 wait in all_reduce even when "active"
    assert busy([replace(node, procs=tuple(hot))]) == \
        ("rank 1 (localhost): evaluate() at hang.py:21",)


def test_a_rank_still_importing_is_busy_even_off_the_cpu():
    """A cold `import torch` waits on the disk (py-spy: idle); the other ranks wait in the
    rendezvous. That is a slow start, not a hang (seen on CI with --hang-timeout 4)."""
    node = load("sleep")
    importing = [{"name": "_find_and_load", "filename": "<frozen importlib._bootstrap>",
                  "line": 1176}, {"name": "<module>", "filename": "/w/hang.py", "line": 11}]
    procs = []
    for p in node.procs:
        if p.rank == 1:
            threads = tuple({**t, "active": False, "frames": importing} for t in p.threads)
            p = replace(p, threads=threads)
        procs.append(p)
    assert [t.split(":")[0] for t in busy([replace(node, procs=tuple(procs))])] == \
        ["rank 1 (localhost)"]


@pytest.mark.parametrize("error,ptrace,want", [
    # py-spy 0.4.3's own words (a non-root user against a root process)
    (DENIED, {"ptrace_scope": 1, "uid": 1000}, "sysctl -w kernel.yama.ptrace_scope=0"),
    ("Operation not permitted (os error 1)", {"container": True, "cap_sys_ptrace": False,
                                              "uid": 1000}, "--cap-add SYS_PTRACE"),
    (DENIED, {"ptrace_scope": 0, "uid": 1000}, "as the job's user or as root"),
    ("no py-spy on the node, and none here to send", {}, "pip install py-spy"),
    ("Error: No such process (os error 3)", {}, "ended while"),
])
def test_attach_failures_get_their_fix(error, ptrace, want):
    assert want in attach_fix(error, ptrace)


def test_unreadable_ranks_are_problems_not_stacks():
    node = load("sleep")
    denied = replace(node, ptrace={"ptrace_scope": 2, "uid": 1000},
                     procs=tuple(replace(p, threads=(), error=DENIED)
                                 for p in node.procs))
    rep = judge([denied])
    assert len(rep.problems) == 3 and not rep.groups
    assert all("ptrace_scope is 2" in p.fix for p in rep.problems)


def test_other_users_processes_matter_only_when_nothing_was_found():
    node = load("sleep")
    assert judge([replace(node, unreadable=7, ptrace={"uid": 1000})]).problems == ()
    empty = judge([replace(node, procs=(), unreadable=7, ptrace={"uid": 1000})])
    assert [p.message for p in empty.problems] == \
        ["7 process(es) of other users could not be looked into"]
