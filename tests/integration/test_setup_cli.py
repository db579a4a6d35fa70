"""`ddpkit setup ssh|firewall|torch|all`: usage errors are one line, a hint and exit 2."""

from __future__ import annotations

import pytest

from tests.conftest import ddpkit


@pytest.mark.parametrize("what", ["ssh", "firewall", "torch", "all"])
def test_setup_needs_the_nodes(what):
    done = ddpkit("setup", what, env={"SLURM_JOB_NODELIST": ""})
    assert done.returncode == 2
    assert f"ddpkit setup {what} needs the nodes" in done.stderr
    assert f"hint: ddpkit setup {what} -H node0,node1" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("what", ["torch", "all"])
def test_setup_torch_wheel_dir_must_hold_torch(what, tmp_path):
    # `setup all` checks it before its first step changes anything (no SSH to node0 here)
    done = ddpkit("setup", what, "-H", "node0", "--wheel-dir", str(tmp_path))
    assert done.returncode == 2 and "no torch wheel in --wheel-dir" in done.stderr
    assert "pip download torch==VERSION -d DIR" in done.stderr


def test_setup_without_what_lists_the_subcommands():
    done = ddpkit("setup")
    assert done.returncode == 2 and "{ssh,firewall,torch,all,horovod}" in done.stderr
