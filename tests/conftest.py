"""Shared fixtures. The virtual cluster is built once per session and torn down at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.vcluster import ClusterUnavailable, VCluster, missing_requirements

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCRIPTS_DIR = Path(__file__).resolve().parent / "scripts"
PYTHON = sys.executable
# The tests read ddpkit's English messages: a Chinese locale on the test machine must not
# change them (tests/unit/test_i18n.py switches languages itself).
os.environ["LC_ALL"] = "C.UTF-8"
os.environ.pop("LANGUAGE", None)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


def ddpkit(*args: str, env: dict | None = None, timeout: float = 120, input: str | None = None,
           cwd: str | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([PYTHON, "-m", "ddpkit", *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env, input=input, cwd=cwd)


@pytest.fixture(scope="session", autouse=True)
def run_records(tmp_path_factory):
    """Every launch in the tests keeps its run record in a temporary folder, not in the
    user's ~/.cache/ddpkit/runs (tests that look at records set their own)."""
    old = os.environ.get("DDPKIT_RUNS_DIR")
    os.environ["DDPKIT_RUNS_DIR"] = str(tmp_path_factory.mktemp("runs"))
    yield
    if old is None:
        os.environ.pop("DDPKIT_RUNS_DIR", None)
    else:
        os.environ["DDPKIT_RUNS_DIR"] = old


@pytest.fixture(scope="session")
def bare_python():
    """The interpreter of `.venv-bare`: torch==2.13.0 and ddpkit's own dependencies, no numpy,
    as `pip install torch` leaves a node (the test venv gets numpy through matplotlib and
    accelerate, which hid torch's numpy-bound object collectives). Built once (about a
    minute, from the local wheels), reused while it works."""
    venv = ROOT / ".venv-bare"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import torch, rich, psutil, ddpkit.runtime"]
    if not py.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        subprocess.run([PYTHON, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run(pip + ["torch==2.13.0", "rich>=12", "psutil>=5.8"], check=True,
                       capture_output=True)
        subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True, capture_output=True)
        subprocess.run(probe, check=True)
    numpy = subprocess.run([str(py), "-c", "import numpy"], capture_output=True)
    assert numpy.returncode != 0, f"{venv} has numpy: the no-numpy tests would prove nothing"
    return str(py)


@pytest.fixture(scope="session")
def vcluster():
    """A 3-node virtual cluster. It fails loudly when it cannot be built: cluster tests never
    skip silently. Opt out explicitly with `pytest -m 'not cluster'`."""
    why = missing_requirements()
    if why:
        pytest.fail(f"virtual cluster unavailable: {why}. Run as root after "
                    "'apt-get install openssh-server iproute2 iptables', or deselect with "
                    "-m 'not cluster'", pytrace=False)
    vc = VCluster(3)
    try:
        vc.up()
    except (ClusterUnavailable, RuntimeError) as exc:
        pytest.fail(f"virtual cluster could not start: {exc}", pytrace=False)
    yield vc
    vc.down()
