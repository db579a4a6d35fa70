"""ddpkit.horovod as `ddpkit launch --horovod` ships it, on 2 real Gloo ranks without numpy:
validation, process sets, differentiable collectives, int16, reducescatter, scaling, async
handles, sparse allreduce, join, optimizer state and force_allreduce (one launch, ~30 s)."""

import ast
import re

from ddpkit.compat import shim_files
from tests.conftest import SCRIPTS_DIR, ddpkit

SCRIPT = SCRIPTS_DIR / "horovod_capabilities.py"


def test_every_module_of_the_shim_is_shipped():
    files = shim_files()
    shipped = {p.rsplit("/", 1)[1] for p in files if p.startswith("hvdshim/horovod/torch/")}
    assert {"__init__.py", "_core.py", "_ops.py", "_wire.py", "_api.py", "_optim.py"} <= shipped
    for path, source in files.items():  # the copies on the nodes import each other relatively
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module in ("__future__",) or not node.module.startswith("ddpkit"), path
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("ddpkit") for a in node.names), path


def test_capabilities_on_two_ranks_without_numpy():
    done = ddpkit("launch", "--horovod", "--nproc-per-node", "2", str(SCRIPT), timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    names = set(re.findall(r'^\s*check\("([^"]+)"', SCRIPT.read_text(), re.M))
    assert len(names) >= 20, names
    for name in names:
        for rank in (0, 1):
            assert f"OK {name} rank={rank}" in out, (name, rank, out[-3000:])
    assert "Numpy is not available" not in out
