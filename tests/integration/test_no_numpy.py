"""The nodes need torch only: ddpkit bench and ddpkit.runtime's object exchange on an
interpreter without numpy (`.venv-bare`, built by the bare_python fixture; torch's own
all_gather_object fails there with "Numpy is not available")."""

import json

from tests.conftest import ddpkit
from tests.launching import SCRIPTS


def test_runtime_objects_and_checkpoint_check_without_numpy(bare_python, tmp_path):
    done = ddpkit("launch", "--nproc-per-node", "2", "--python", bare_python,
                  str(SCRIPTS / "objects_no_numpy.py"), str(tmp_path / "ckpt.pt"), timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for rank in (0, 1):  # uneven gathers, a 100 kB broadcast, a checkpoint saved and resumed
        assert f"OBJECTS OK rank={rank} start=0 resumed=7" in done.stdout, done.stdout


def test_bench_without_numpy(bare_python, tmp_path):
    out = tmp_path / "bench.json"
    done = ddpkit("bench", "--nproc-per-node", "2", "--python", bare_python, "-b", "8", "-e",
                  "1K", "-f", "32", "-n", "2", "--json-file", str(out), timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Numpy is not available" not in done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["world_size"] == 2 and [r["size"] for r in report["rows"]] == [8, 256]
    assert "#  Rank  1 Group  0 on" in done.stdout  # the hosts came through all_gather_object
