"""Every training style in examples/ runs across the virtual cluster through ddpkit launch."""

import re

import pytest

from tests.conftest import ROOT, ddpkit

EXAMPLES = ROOT / "examples"


def results(out):
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"RESULT rank=(\d+)\S* .*params=(\S+)", out)}


def launch(vc, *args, hosts=None, env=None):
    return ddpkit("launch", "--ssh-config", str(vc.ssh_config), "-H", hosts or vc.hosts_spec(1),
                  *args, env=env, timeout=240)


@pytest.mark.parametrize("script", ["ddp_seed_corrected.py", "ddp_runtime.py"])
def test_ddp_examples_across_nodes(vcluster, script, tmp_path):
    extra = ["--ckpt", str(tmp_path / "ckpt.pt")] if script == "ddp_runtime.py" else []
    done = launch(vcluster, str(EXAMPLES / script), *extra)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = results(done.stdout)
    assert sorted(got) == [0, 1, 2] and len(set(got.values())) == 1


def test_horovod_script_without_horovod(vcluster):
    done = launch(vcluster, "--horovod", str(EXAMPLES / "horovod_style.py"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = results(done.stdout)
    assert sorted(got) == [0, 1, 2] and len(set(got.values())) == 1
    assert "average loss" in done.stdout


def test_accelerate_script_on_every_node(vcluster):
    done = launch(vcluster, "--engine", "accelerate", str(EXAMPLES / "accelerate_style.py"),
                  hosts=vcluster.hosts_spec(1, vcluster.nodes[:2]))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    got = results(done.stdout)
    assert sorted(got) == [0, 1] and len(set(got.values())) == 1
    assert "world=2" in done.stdout
    dry = launch(vcluster, "--engine", "accelerate", "--dry-run", str(EXAMPLES / "accelerate_style.py"),
                 hosts=vcluster.hosts_spec(1, vcluster.nodes[:2]))
    for words in ("accelerate.commands.launch --num_machines 2 --machine_rank 1",
                  f"--main_process_ip {vcluster.nodes[0].ip}", "--main_process_port 29500"):
        assert words in dry.stdout, dry.stdout


def test_restart_resumes_from_the_checkpoint(vcluster, tmp_path):
    """A worker killed mid-epoch with --max-restarts 1: torchrun restarts the group on every
    node, training resumes from the last complete checkpoint and ends where an uninterrupted
    run ends."""
    hosts = vcluster.hosts_spec(1, vcluster.nodes[:2])
    clean = launch(vcluster, str(EXAMPLES / "ddp_runtime.py"), "--ckpt", str(tmp_path / "a.pt"),
                   hosts=hosts)
    crashed = launch(vcluster, "--max-restarts", "1", "--env", "CRASH_AT=1:5:1",
                     str(EXAMPLES / "ddp_runtime.py"), "--ckpt", str(tmp_path / "b.pt"),
                     hosts=hosts)
    assert clean.returncode == 0 and crashed.returncode == 0, crashed.stderr[-3000:]
    assert "exitcode: 17" in crashed.stderr or "exitcode: 17" in crashed.stdout  # it did die
    assert crashed.stdout.count("epoch 1 loss") == 1  # epoch 1 finished once, after the restart
    a, b = results(clean.stdout), results(crashed.stdout)
    assert sorted(b) == [0, 1] and set(a.values()) == set(b.values())
