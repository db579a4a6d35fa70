"""torchrun habits as pure functions: spellings, --nproc-per-node words, per-node flags, ports,
and the plans they give (one node with a fixed port, --no-python, unknown addresses)."""

import argparse
import shlex

import pytest

from ddpkit.cli.common import port_from
from ddpkit.cli.habits import accept_or_refuse, equivalent, nproc_value
from ddpkit.errors import UsageError
from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import Addr, LaunchOptions, NodeFacts, make_plan

OPTS = LaunchOptions(script="train.py", python="/venv/bin/python", workdir="/work",
                     run_id="ddpkit-abc")


@pytest.mark.parametrize("text, value", [("4", 4), ("gpu", "gpu"), ("cpu", "cpu"),
                                         ("auto", "auto")])
def test_nproc_value_takes_torchrun_words(text, value):
    assert nproc_value(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "xpu2", "four"])
def test_nproc_value_refuses_the_rest(text):
    with pytest.raises(argparse.ArgumentTypeError):
        nproc_value(text)


@pytest.mark.parametrize("flags, port", [
    ([("standalone", [])], None),
    ([("nnodes", "1"), ("node_rank", "0"), ("master_addr", "127.0.0.1"),
      ("master_port", "29501")], 29501),
    ([("rdzv_endpoint", "localhost:29600"), ("rdzv_backend", "c10d")], 29600),
    ([("nnodes", "1:1")], None),
])
def test_one_node_flags_that_say_what_ddpkit_does_are_accepted(flags, port):
    assert accept_or_refuse(flags, [], [], 1) == port


@pytest.mark.parametrize("flags, nhosts", [
    ([("nnodes", "2")], 1),
    ([("node_rank", "1")], 1),
    ([("master_addr", "10.0.0.1")], 1),
    ([("standalone", [])], 2),
    ([("rdzv_endpoint", "10.0.0.1:29400")], 1),
])
def test_per_node_flags_are_answered_with_exit_2(flags, nhosts):
    with pytest.raises(UsageError) as info:
        accept_or_refuse(flags, ["x.py"], [], nhosts)
    assert info.value.code == 2
    assert "ddpkit launch" in (info.value.hint or "")


def test_the_answer_is_the_equivalent_command():
    argv = ["--nnodes", "2", "--node_rank", "0", "--master_addr", "10.0.0.1",
            "--master_port=29501", "--nproc_per_node", "4", "train.py", "--lr", "0.1"]
    flags = [("nnodes", "2"), ("node_rank", "0"), ("master_addr", "10.0.0.1"),
             ("master_port", "29501")]
    with pytest.raises(UsageError) as info:
        accept_or_refuse(flags, argv, ["--lr", "0.1"], 1)
    assert "ddpkit starts every node from here: give the nodes with -H" in info.value.message
    cmd = shlex.split(info.value.hint.split("instead: ", 1)[1])
    assert cmd[:6] == ["ddpkit", "launch", "-H", "10.0.0.1:4,node1:4", "--port", "29501"]
    assert cmd[-3:] == ["train.py", "--lr", "0.1"]
    assert "--nnodes" not in cmd and "--master_addr" not in cmd and "--node_rank" not in cmd


def test_equivalent_keeps_the_hosts_already_given():
    cmd = equivalent([("standalone", [])], ["-H", "a,b", "--standalone", "t.py"], [])
    assert cmd == "ddpkit launch -H a,b t.py"


def test_master_port_is_the_default_of_port():
    ns = argparse.Namespace(port=None)
    assert port_from(ns, {}) == (29500, False)
    assert port_from(ns, {"MASTER_PORT": "29501"}) == (29501, True)
    assert port_from(argparse.Namespace(port=29700), {"MASTER_PORT": "29501"}) == (29700, True)
    with pytest.raises(UsageError):
        port_from(ns, {"MASTER_PORT": "http"})


def test_one_node_with_a_chosen_port_uses_it_instead_of_a_random_one():
    free = make_plan([Host("localhost")], OPTS, {}, [NodeFacts(local=True)])
    assert "--standalone" in free.nodes[0].argv
    opts = LaunchOptions(script="train.py", port=29511, fixed_port=True)
    argv = make_plan([Host("localhost")], opts, {}, [NodeFacts(local=True)]).nodes[0].argv
    assert "--standalone" not in argv
    assert argv[argv.index("--rdzv-endpoint") + 1] == "127.0.0.1:29511"


@pytest.mark.parametrize("word, gpus, cpus, expect", [
    ("gpu", 4, 16, 4), ("auto", 4, 16, 4), ("auto", 0, 16, 16), ("cpu", 4, 16, 16)])
def test_nproc_words_are_resolved_from_the_probe(word, gpus, cpus, expect):
    opts = LaunchOptions(script="t.py", nproc_per_node=word)
    plan = make_plan([Host("n0")], opts, {}, [NodeFacts(local=True, gpus=gpus, cpus=cpus)])
    assert plan.world_size == expect
    argv = plan.nodes[0].argv
    assert argv[argv.index("--nproc-per-node") + 1] == str(expect)


def test_nproc_gpu_on_a_node_without_gpus_is_a_usage_error():
    with pytest.raises(UsageError, match="has no NVIDIA GPU"):
        make_plan([Host("n0")], LaunchOptions(script="t.py", nproc_per_node="gpu"), {},
                  [NodeFacts(local=True, cpus=8)])


def test_no_python_is_passed_to_torchrun_and_excludes_module():
    opts = LaunchOptions(script="./run.sh", no_python=True)
    argv = make_plan([Host("localhost")], opts, {}, [NodeFacts(local=True)]).nodes[0].argv
    assert "--no-python" in argv and argv[-2:] == ("--", "./run.sh")
    with pytest.raises(UsageError):
        LaunchOptions(script="m", module=True, no_python=True)


def _probed(last):
    return NodeFacts(hostname=f"n{last}", ssh_hostname=f"198.18.0.{last}",
                     addrs=(Addr("eth0", f"198.18.0.{last}/24"),), cpus=2)


def test_a_dry_run_marks_what_it_could_not_probe():
    hosts = [Host("n1"), Host("n2"), Host("n3")]
    facts = [_probed(1), NodeFacts(ssh_hostname="n2", known=False, unreachable=True), _probed(3)]
    plan = make_plan(hosts, OPTS, {}, facts)
    assert plan.master_addr == "198.18.0.1"
    n2 = plan.nodes[1].argv
    assert n2[n2.index("--local-addr") + 1] == "<address of n2>"
    assert plan.nodes[2].env["GLOO_SOCKET_IFNAME"] == "eth0"
    first_unknown = [NodeFacts(ssh_hostname="n1", known=False, unreachable=True), _probed(2)]
    assert make_plan(hosts[:2], OPTS, {}, first_unknown).master_addr == "<address of n1>"


def test_no_preflight_dials_the_first_host_by_the_name_given():
    hosts = [Host("198.18.0.1"), Host("198.18.0.2")]
    facts = [NodeFacts(ssh_hostname=h.name, known=False) for h in hosts]
    plan = make_plan(hosts, OPTS, {}, facts)
    assert plan.master_addr == "198.18.0.1"
    assert not any("no non-loopback" in n for n in plan.notes)
    assert "--local-addr" not in plan.nodes[1].argv
