"""`ddpkit lint` as a user runs it, and the lint step of `ddpkit launch` (real CLI processes)."""

import json

from tests.conftest import FIXTURES, ddpkit

CORPUS = FIXTURES / "lint" / "corpus"
GUIDE = CORPUS / "guide000_ddp_demo.py"
GUIDE_SH = CORPUS / "guide000_launch.sh"
CORRECT = CORPUS / "ok_multigpu_torchrun.py"


def test_the_guides_mistakes_are_named_with_line_why_and_fix():
    done = ddpkit("lint", str(GUIDE), str(GUIDE_SH))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert f"{GUIDE}:45: error: [rank_from_args]" in out
    assert f"{GUIDE_SH}:2: warn: [deprecated_launcher]" in out
    assert f"{GUIDE_SH}:6: error: [rank_from_args] script argument --rank 0" in out
    assert f"{GUIDE_SH}:29: warn: [fake_nccl_env] NCCL_SOCKET_TIMEOUT" in out
    assert "    why: " in out and "    fix: " in out
    assert "2 file(s): 4 error(s), 4 warning(s)" in out


def test_json_and_exit_codes():
    done = ddpkit("lint", "--json", str(GUIDE))
    report = json.loads(done.stdout)
    assert done.returncode == 1
    primary = [f for f in report["findings"] if f["same_as"] is None]
    assert [(f["kind"], f["line"], f["severity"]) for f in primary] == [
        ("rank_from_args", 45, "error")]
    assert primary[0]["fixable"] is False  # tcp:// init: no env-based diff
    notes = {(f["line"], f["same_as"]) for f in report["findings"] if f["same_as"]}
    assert {(13, 45), (42, 45)} <= notes  # init_process_group(rank=...), the --rank option
    ok = ddpkit("lint", str(CORRECT))
    assert ok.returncode == 0 and "0 error(s), 0 warning(s)" in ok.stdout


def test_warnings_fail_only_with_strict(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import os\nos.environ['NCCL_SOCKET_TIMEOUT'] = '600'\n")
    assert ddpkit("lint", str(script)).returncode == 0
    assert ddpkit("lint", "--strict", str(script)).returncode == 1


def test_diff_prints_the_mechanical_fixes_and_changes_nothing(tmp_path):
    script = tmp_path / "run.sh"
    text = "python -m torch.distributed.launch --nproc_per_node=2 --use_env train.py\n"
    script.write_text(text)
    done = ddpkit("lint", "--diff", str(script))
    assert "-python -m torch.distributed.launch --nproc_per_node=2 --use_env train.py" in done.stdout
    assert "+torchrun --nproc_per_node=2 train.py" in done.stdout
    assert script.read_text() == text


def test_user_errors_are_one_line_with_a_hint(tmp_path):
    missing = ddpkit("lint", str(tmp_path / "nope.py"))
    assert missing.returncode == 2 and "cannot read" in missing.stderr and "hint:" in missing.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("def f(:\n    pass\nos.environ['NCCL_TIMEOUT'] = '1'\n")
    broken = ddpkit("lint", str(bad))  # the line checks still run; the file fails
    assert broken.returncode == 1 and f"{bad}:1: not valid Python" in broken.stderr
    assert f"{bad}:3: warn: [fake_nccl_env]" in broken.stdout
    assert "Traceback" not in missing.stderr + broken.stderr


def test_launch_lints_the_script_and_strict_stops_it(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n"
                      "if dist.get_rank() == 0:\n    dist.barrier()\n"
                      "dist.destroy_process_group()\n")
    shown = ddpkit("launch", "--dry-run", str(script), cwd=str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert "lint found 1 problem(s)" in shown.stderr
    assert f"{script}:4: error: [rank0_collective_desync]" in shown.stderr
    assert "torchrun" in shown.stdout  # the plan is still printed: lint blocks nothing by default
    stopped = ddpkit("launch", "--dry-run", "--strict", str(script), cwd=str(tmp_path))
    assert stopped.returncode == 1 and "torchrun" not in stopped.stdout
    quiet = ddpkit("launch", "--dry-run", "--no-lint", str(script), cwd=str(tmp_path))
    assert quiet.returncode == 0 and "lint" not in quiet.stderr


def test_a_script_lint_cannot_read_never_stops_a_launch(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("def broken(:\n")  # not Python: lint steps aside
    done = ddpkit("launch", "--dry-run", "--strict", str(script), cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "lint" not in done.stderr and "Traceback" not in done.stderr
