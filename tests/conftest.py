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
