"""Real Horovod, built by `ddpkit setup horovod`, against ddpkit.horovod: the same script ends
with the same parameters. The build takes minutes (it compiles Horovod against this torch); it
runs in CI every time, and locally when Horovod is not installed yet."""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from ddpkit.prepare.setup.horovod import patch_cxx17
from tests.conftest import ROOT, ddpkit

EXAMPLE = ROOT / "examples" / "horovod_style.py"


def test_patch_cxx17(tmp_path):
    (tmp_path / "horovod" / "torch").mkdir(parents=True)
    (tmp_path / "CMakeLists.txt").write_text("set(CMAKE_CXX_STANDARD 14)\nother\n")
    (tmp_path / "horovod/torch/CMakeLists.txt").write_text("  set(CMAKE_CXX_STANDARD 14)\n")
    assert patch_cxx17(tmp_path) == ["CMakeLists.txt", "horovod/torch/CMakeLists.txt"]
    assert "CMAKE_CXX_STANDARD 17" in (tmp_path / "CMakeLists.txt").read_text()
    assert patch_cxx17(tmp_path) == []  # already patched


@pytest.fixture(scope="module")
def real_horovod():
    if os.environ.get("CI") or importlib.util.find_spec("horovod") is None:
        done = ddpkit("setup", "horovod", timeout=1500)
        assert done.returncode == 0, done.stderr[-4000:]
        assert "[X] Gloo" in done.stdout
    check = subprocess.run([sys.executable, "-c", "import horovod.torch"], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stderr


def params(out: str) -> list[float]:
    m = re.search(r"RESULT rank=0 params=(\S+)", out)
    assert m, out[-3000:]
    return [float(v) for v in m.group(1).split(",")]


def test_same_parameters_under_real_horovod_and_ddpkit(real_horovod):
    real = ddpkit("launch", "--engine", "horovod", "-np", "2", "-H", "localhost:2", str(EXAMPLE),
                  timeout=300)
    assert real.returncode == 0, real.stdout[-2000:] + real.stderr[-2000:]
    ours = ddpkit("launch", "--horovod", "--nproc-per-node", "2", str(EXAMPLE), timeout=300)
    assert ours.returncode == 0, ours.stdout[-2000:] + ours.stderr[-2000:]
    a, b = params(real.stdout), params(ours.stdout)
    assert len(a) == len(b) == 193
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-5
