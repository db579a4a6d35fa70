"""nodeside/torchrun.py: torchrun whose tee shows every line a rank wrote, even one written in
the instant between the tee's last read and its look at "finished" (pytorch/pytorch#143823)."""

import io
import subprocess
import sys

import pytest
from torch.distributed.elastic.multiprocessing import tail_log

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


def test_the_guard_gives_torchrun_its_log_directory(tmp_path):
    """The tee needs --log-dir; the guard puts it right after torchrun, not among the
    script's own arguments."""
    cfg = {"argv": ["/venv/bin/python", "@TMP@/bin/torchrun", "--nnodes", "1", "--",
                    "@TMP@/ddpkit_bootstrap.py", "train.py", "--log-dir", "mine"],
           "files": {"bin/torchrun": source("torchrun")}, "log_dir_flag": True}
    guard = {}  # the guard is a script (it runs main() at its end): its functions without that
    exec(compile(source("guard").rsplit("\nmain()", 1)[0], "guard.py", "exec"), guard)
    argv, _env = guard["command"](cfg, str(tmp_path))
    assert argv[:4] == ["/venv/bin/python", f"{tmp_path}/bin/torchrun", "--log-dir", f"{tmp_path}/logs"]
    assert argv[-2:] == ["--log-dir", "mine"]
    assert (tmp_path / "bin" / "torchrun").read_text() == source("torchrun")
    # accelerate's launcher through the same file: its own --log_dir, after its module, once
    cfg["argv"] = ["/venv/bin/python", "@TMP@/bin/torchrun", "-m", "accelerate.commands.launch",
                   "--num_machines", "1", "train.py"]
    argv, _env = guard["command"](cfg, str(tmp_path))
    assert argv[1:6] == [f"{tmp_path}/bin/torchrun", "-m", "accelerate.commands.launch", "--log_dir",
                         f"{tmp_path}/logs"]
    assert "--log-dir" not in argv
