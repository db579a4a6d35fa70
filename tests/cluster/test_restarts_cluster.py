"""--max-restarts across nodes ends: every attempt failing gives up after N+1 attempts on all
three virtual nodes, instead of hanging (see also tests/integration/test_restarts.py)."""

import re

from tests.conftest import ddpkit
from tests.launching import SCRIPTS


def test_failing_every_attempt_on_three_nodes_ends_after_all_attempts(vcluster):
    done = ddpkit("launch", "--ssh-config", str(vcluster.ssh_config), "-H", vcluster.hosts_spec(1),
                  "--max-restarts", "2", str(SCRIPTS / "fail_on_rank.py"),
                  env={"FAIL_RANK": "1", "FAIL_AFTER": "0.2"}, timeout=300)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-3000:]
    # c10d assigns node ranks at each rendezvous: rank 1 may sit on any node
    raised = re.findall(r"node\d:1 +\| RuntimeError: planned failure on rank 1", out)
    assert len(raised) == 3, out[-4000:]  # the first attempt and 2 restarts, then it gave up
    assert re.search(r"FAILED: node\d failed first .*planned failure on rank 1",
                     " ".join(done.stderr.split())), done.stderr[-2000:]
