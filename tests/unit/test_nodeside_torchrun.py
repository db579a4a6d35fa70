"""nodeside/torchrun.py: torchrun whose tee shows every line a rank wrote, even one written in
the instant between the tee's last read and its look at "finished" (pytorch/pytorch#143823)."""

import io
import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing import tail_log

from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import LaunchOptions, NodeFacts, make_plan
from ddpkit.nodeside import source
from ddpkit.nodeside import torchrun as wrapper


class WritesItsLastLineAsItFinishes:
    """A rank that writes its last line and exits right after the tee found the end of its
    file, before the tee asks whether it finished: the race, made certain."""

    def __init__(self, path):
        self.path, self.finished = path, False

    def is_set(self):
        if not self.finished:
            with open(self.path, "a") as f:
                f.write("OK broadcast_object rank=2\n")
            self.finished = True
        return True


def tee(path, finished):
    out = io.StringIO()
    tail_log.tail_logfile(header="[rank2]:", file=str(path), dst=out, finished=finished,
                          interval_sec=0.01, log_line_filter=lambda _line: True)
    return out.getvalue().splitlines()


@pytest.fixture
def restored(monkeypatch):
    monkeypatch.setattr(tail_log, "tail_logfile", tail_log.tail_logfile)


def test_the_last_line_of_a_rank_reaches_the_console(tmp_path, restored):
    log = tmp_path / "stdout.log"
    log.write_text("OK identity rank=2\n")
    # torch's tee alone loses it (what CI saw: a correct run's last `OK` line missing)
    assert tee(log, WritesItsLastLineAsItFinishes(log)) == ["[rank2]:OK identity rank=2"]
    log.write_text("OK identity rank=2\n")
    assert wrapper.patch_tail_log()
    assert tee(log, WritesItsLastLineAsItFinishes(log)) == [
        "[rank2]:OK identity rank=2", "[rank2]:OK broadcast_object rank=2"]
    assert not wrapper.patch_tail_log()  # once is enough: no second wrapper around the first


def test_it_is_torchrun_itself(tmp_path):
    """The wrapper runs torch.distributed.run as `python -m` would: its own help, its exit."""
    path = tmp_path / "bin" / "torchrun"
    path.parent.mkdir()
    path.write_text(source("torchrun"))
    done = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--nproc-per-node" in done.stdout and "--rdzv-endpoint" in done.stdout


@pytest.mark.parametrize("engine, flag", [("torchrun", "--log-dir"), ("accelerate", "--log_dir")])
def test_torchrun_gets_a_log_directory_in_the_nodes_run_folder(tmp_path, engine, flag):
    """The tee needs a log directory (else torchrun leaves one in /tmp per run): the plan names
    one in the node's run folder, among the launcher's options, never among the script's own
    arguments, and the guard makes it the folder it removes at the end."""
    opts = LaunchOptions(script="train.py", script_args=("--log-dir", "mine"), engine=engine,
                         python="/venv/bin/python")
    plan = make_plan([Host("localhost", 2)], opts, {}, [NodeFacts(local=True)]).nodes[0]
    # torchrun's own options end at "--"; accelerate's at the script (the bootstrap)
    end = "--" if engine == "torchrun" else "@TMP@/ddpkit_bootstrap.py"
    launcher = plan.argv[:plan.argv.index(end)]
    assert launcher.count(flag) == 1 and "mine" not in launcher
    at = launcher.index(flag)
    assert plan.argv[at + 1] == "@TMP@/logs"
    guard = {}  # the guard is a script (it runs main() at its end): its functions without that
    exec(compile(source("guard").rsplit("\nmain()", 1)[0], "guard.py", "exec"), guard)
    cfg = {"argv": list(plan.argv), "files": {"bin/torchrun": source("torchrun")}}
    argv, _env = guard["command"](cfg, str(tmp_path))
    assert argv[:2] == ["/venv/bin/python", f"{tmp_path}/bin/torchrun"]
    assert argv[at:at + 2] == [flag, f"{tmp_path}/logs"] and argv[-2:] == ["--log-dir", "mine"]
    assert (tmp_path / "bin" / "torchrun").read_text() == source("torchrun")
