"""ddpkit.runtime and ddpkit.horovod with real Gloo processes."""

import subprocess
import sys
import textwrap

from tests.conftest import ROOT, SCRIPTS_DIR, ddpkit

RUNTIME = """
import os, torch, ddpkit
assert ddpkit.scale_lr(0.1, world_size=4) == 0.4 and round(ddpkit.scale_lr(0.1, "sqrt", 4), 9) == 0.2
assert ddpkit.global_batch_size(32, world_size=8, accumulation=2) == 512
try:
    ddpkit.scale_lr(0.1, "cubic")
except ValueError as e:
    assert "linear" in str(e)
with ddpkit.init() as ctx:
    assert ctx.world_size == 1 and ctx.backend == "gloo" and ctx.device.type == "cpu" and ctx.is_main
    data = torch.utils.data.TensorDataset(torch.arange(20.0))
    loader = ddpkit.loader(data, batch_size=5, num_workers=0)
    orders = []
    for epoch in loader.epochs(0, 2):
        orders.append(torch.cat([b[0] for b in loader]).tolist())
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])  # set_epoch happened
    model = ddpkit.wrap(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    path = os.path.join(os.environ["TMP_DIR"], "c.pt")
    assert ddpkit.load_checkpoint(path, model, opt) == 0
    ddpkit.save_checkpoint(path, model, opt, epoch=3)
    assert sorted(os.listdir(os.environ["TMP_DIR"])) == ["c.pt"]  # atomic: no temporary left
    fresh = torch.nn.Linear(2, 1)
    assert ddpkit.load_checkpoint(path, fresh) == 3
    assert torch.equal(fresh.weight, model.module.weight)
print("RUNTIME OK")
"""


def test_runtime_in_a_world_of_one(tmp_path):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(RUNTIME)], capture_output=True,
                          text=True, env={"TMP_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          timeout=120, cwd=str(ROOT))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RUNTIME OK" in done.stdout


def test_horovod_api_on_three_ranks():
    done = ddpkit("launch", "--nproc-per-node", "3", str(SCRIPTS_DIR / "horovod_api.py"),
                  timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    checks = [ln.split("| ", 1)[1] for ln in done.stdout.splitlines() if "| OK " in ln]
    names = {c.split(" rank=")[0] for c in checks}
    assert len(names) == 18, sorted(names)
    assert len(checks) == 18 * 3  # every check passed on every rank
