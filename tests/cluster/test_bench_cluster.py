"""ddpkit bench across the virtual cluster; --pairs finds a rate-limited node."""

import subprocess

from tests.conftest import ddpkit


def test_three_node_bench(vcluster):
    done = ddpkit("bench", "--ssh-config", str(vcluster.ssh_config), "-H", vcluster.hosts_spec(1),
                  "-b", "64K", "-e", "1M", "-f", "4", "-n", "5", timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "all_reduce on gloo, 3 ranks" in done.stdout
    assert "# Out of bounds values : 0 OK" in done.stdout
    rows = [ln for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(rows) == 3


def test_pairs_names_the_rate_limited_node(vcluster):
    slow = vcluster.nodes[2]
    shape = ["tc", "qdisc", "add", "dev", slow.veth, "root", "tbf", "rate", "200mbit",
             "burst", "32kbit", "latency", "400ms"]
    subprocess.run(shape, check=True)
    try:
        done = ddpkit("bench", "--ssh-config", str(vcluster.ssh_config), "-H",
                      vcluster.hosts_spec(1), "--pairs", timeout=180)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", slow.veth, "root"], check=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "# node2 is clearly slower" in done.stdout
    assert "slowest link:" in done.stdout and "node2" in done.stdout.split("slowest link:")[1]
