"""The exit bootstrap in the plan (every engine where it applies) and the summary's reading of
its end-of-script line (launch/shutdown.py)."""

from __future__ import annotations

import pytest

from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import BOOTSTRAP, LaunchOptions, NodeFacts, make_plan
from ddpkit.launch.shutdown import describe, split_script_end, worker_death

LOCAL = [NodeFacts(local=True)]


def argv_of(**kwargs) -> list[str]:
    opts = LaunchOptions(script="train.py", script_args=("--lr", "1"), **kwargs)
    return list(make_plan([Host("localhost", 2)], opts, {}, LOCAL).nodes[0].argv)


@pytest.mark.parametrize("kwargs, tail, module_flag", [
    ({}, [BOOTSTRAP, "train.py", "--lr", "1"], False),
    ({"module": True}, [BOOTSTRAP, "-m", "train.py", "--lr", "1"], False),
    ({"bootstrap": False}, ["train.py", "--lr", "1"], False),
    ({"bootstrap": False, "module": True}, ["train.py", "--lr", "1"], True),
    ({"no_python": True}, ["train.py", "--lr", "1"], False),  # an executable: nothing to wrap
    ({"engine": "accelerate"}, [BOOTSTRAP, "train.py", "--lr", "1"], False),
    ({"engine": "accelerate", "module": True}, [BOOTSTRAP, "-m", "train.py", "--lr", "1"], False),
])
def test_workers_run_the_script_through_the_bootstrap(kwargs, tail, module_flag):
    argv = argv_of(**kwargs)
    assert argv[-len(tail):] == tail
    assert ("--module" in argv) == module_flag  # -m goes to the bootstrap, not to torchrun


def test_real_horovod_runs_the_script_directly():
    # horovodrun starts the other nodes itself: the bootstrap file would not be there
    argv = argv_of(engine="horovod")
    assert BOOTSTRAP not in argv and argv[-3:] == ["train.py", "--lr", "1"]


@pytest.mark.parametrize("line, expect", [
    ("@@ddpkit-script-end 0 4242", ("", 0, 4242)),
    ("no newline at the end@@ddpkit-script-end 3 17", ("no newline at the end", 3, 17)),
    ("loss 0.5", ("loss 0.5", None, None)),
    ("@@ddpkit-script-end oops", ("@@ddpkit-script-end oops", None, None)),
])
def test_split_script_end(line, expect):
    assert split_script_end(line) == expect


DIED = ("E1201 05:50:05.281000 24070 torch/distributed/elastic/multiprocessing/api.py:1002] "
        "failed (exitcode: -6) local_rank: 1 (pid: 24176) of binary: /venv/bin/python")


def test_a_crash_after_every_script_ended_is_a_shutdown_crash():
    assert worker_death(DIED) == (-6, 24176)
    ends = {24175: (0, 0), 24176: (1, 0)}
    assert describe([(-6, 24176)], ends, 2) == (
        "all ranks finished training; rank 1 crashed during interpreter shutdown "
        "(killed by SIGABRT)")
    assert describe([(-6, 24176)], {24176: (1, 0)}, 3) == (
        "rank 1 finished its script, then crashed during interpreter shutdown (killed by "
        "SIGABRT); ranks 0, 2 had not reported the end of their script")


@pytest.mark.parametrize("deaths, ends", [
    ([(-6, 24176)], {24175: (0, 0)}),  # the dead worker never reached the end: training
    ([(1, 24176)], {24176: (1, 1)}),  # the script itself failed
    ([], {24176: (1, 0)}),  # no worker died (ssh lost, torchrun failed)
])
def test_failures_during_training_are_not_shutdown_crashes(deaths, ends):
    assert describe(deaths, ends, 2) == ""


@pytest.mark.parametrize("bootstrap", [True, False])
def test_the_supervisor_ships_the_bootstrap_only_when_the_plan_runs_it(bootstrap):
    import io

    from ddpkit.launch.output import Printer
    from ddpkit.launch.remote import SshOptions
    from ddpkit.launch.supervise import Supervisor

    opts = LaunchOptions(script="train.py", bootstrap=bootstrap)
    plan = make_plan([Host("localhost", 2)], opts, {}, LOCAL)
    sup = Supervisor(plan, SshOptions(), Printer(io.StringIO(), io.StringIO(), 8, None),
                     files={"job.py": "print(1)"})
    assert sup.files["job.py"] == "print(1)"
    assert ("ddpkit_bootstrap.py" in sup.files) == bootstrap
    if bootstrap:
        assert sup.files["ddpkit_bootstrap.py"].startswith("# Script bootstrap")
