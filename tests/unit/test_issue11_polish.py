"""Small things a new user tripped over (issue 11): hints that show every accepted form,
NCCL's interface syntax under GLOO_SOCKET_IFNAME, port fixes that launch honours."""

from dataclasses import replace

import pytest

from ddpkit.errors import UsageError
from ddpkit.launch.hosts import parse_hostfile
from ddpkit.prepare.checks import Status
from ddpkit.prepare.checks.gpu import cuda_wheel_command
from ddpkit.prepare.checks.network import port_free
from tests.unit.test_checks import BASE, by_id


@pytest.mark.parametrize("line", ["node0 slots=x", "node0 slots:4", "node0:x", "node0 4"])
def test_a_bad_hostfile_line_shows_both_accepted_forms(line):
    with pytest.raises(UsageError) as info:
        parse_hostfile(line + "\n", "hosts.txt")
    assert "node0 slots=4" in info.value.hint and "node0:4" in info.value.hint
    assert info.value.message.startswith("hosts.txt:1:")


@pytest.mark.parametrize("spec", ["^docker0,lo", "=eth0"])
def test_nccl_syntax_in_gloo_socket_ifname_is_named_as_such(spec):
    r = by_id(replace(BASE, env={"GLOO_SOCKET_IFNAME": spec}))["env.GLOO_SOCKET_IFNAME"]
    assert r.status == Status.FAIL
    assert f"NCCL's '{spec[0]}' syntax" in r.summary and "does not exist" not in r.summary
    assert "export GLOO_SOCKET_IFNAME=" in r.hint and "^" not in r.hint.split()[1]


def test_gloo_socket_ifname_with_exact_names_is_still_checked():
    r = by_id(replace(BASE, env={"GLOO_SOCKET_IFNAME": "ib9"}))["env.GLOO_SOCKET_IFNAME"]
    assert "ib9, which does not exist" in r.summary


def test_port_in_use_fix_names_what_launch_reads():
    r = port_free(replace(BASE, master_port=29500, port_bind_error="in use"))
    assert "export MASTER_PORT=29501" in r.hint and "ddpkit launch --port 29501" in r.hint


def test_cuda_wheel_command():
    assert cuda_wheel_command("12.4", "/p/python").startswith(
        "/p/python -m pip install torch --index-url https://download.pytorch.org/whl/cu124")
    assert "ddpkit doctor" in cuda_wheel_command()


def _probe(name, gpus, torch="2.13.0+cpu", torch_cuda=""):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.plan import NodeFacts
    from ddpkit.launch.probe import Probe

    return Probe(Host(name), NodeFacts(gpus=gpus), None,
                 {"torch": torch, "torch_cuda": torch_cuda})


def test_cpu_torch_on_a_gpu_node_gets_a_note_with_the_wheel():
    from ddpkit.cli.bench import cpu_torch_on_gpus

    notes = cpu_torch_on_gpus([_probe("n0", 8), _probe("n1", 0),
                               _probe("n2", 8, "2.13.0+cu130", "13.0")], "/venv/bin/python")
    (note,) = notes
    assert note.startswith("n0 has 8 NVIDIA GPU(s) but torch 2.13.0+cpu is a CPU build")
    assert "/venv/bin/python -m pip install torch --index-url" in note
