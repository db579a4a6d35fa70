"""What does ddpkit launch cost over plain torchrun?

1. `ddpkit launch --nproc-per-node 2 S` against `torchrun --standalone --nproc-per-node 2 S`
   on this machine, alternately (aim: ratio <= 1.05).
2. A 3-node launch on the namespace virtual cluster (real sshd; needs root) against the local
   launch of the same world size, alternately.
3. The same 3-node launch against what a user would type without ddpkit: `ssh NODE torchrun
   ... --rdzv-backend c10d --rdzv-endpoint NODE0:PORT` to the three nodes in parallel, with the
   same rendezvous (aim: ratio <= 1.05). As root on Linux it also prints the CPU time of each
   side: the launcher, ssh, the nodes' sshd and all they start are in one cgroup (the nodes'
   sshd are started from this process), and on a shared, CPU-bound 2-core machine CPU time is
   steadier than the wall clock.

    python benchmarks/launch_overhead.py [--rounds 5] [--only local|cluster|ssh]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

from _timing import alternate, wall

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = str(ROOT / "tests" / "scripts" / "train_ddp.py")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only", choices=("local", "cluster", "ssh"),
                        help="run one part: 1 (local), 2 (cluster) or 3 (ssh)")
    args = parser.parse_args()
    py = sys.executable
    if args.only in (None, "local"):
        torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    SCRIPT]
        ddpkit = [py, "-m", "ddpkit", "launch", "--nproc-per-node", "2", SCRIPT]
        t_ddp, t_run = alternate(ddpkit, torchrun, args.rounds)
        print(f"local, 2 processes: ddpkit launch {t_ddp:.2f} s, torchrun --standalone "
              f"{t_run:.2f} s, ratio {t_ddp / t_run:.3f} (aim <= 1.05)")
    if args.only == "local":
        return

    from tests.vcluster import VCluster, missing_requirements

    why = missing_requirements()
    if why:
        print(f"virtual cluster part skipped: {why}")
        return
    with cpu_cgroup() as cpu_seconds, VCluster(3) as vc:
        cluster = [py, "-m", "ddpkit", "launch", "--ssh-config", str(vc.ssh_config), "-H",
                   vc.hosts_spec(1), SCRIPT]
        local3 = [py, "-m", "ddpkit", "launch", "--nproc-per-node", "3", SCRIPT]
        if args.only in (None, "cluster"):
            t_cluster, t_local = alternate(cluster, local3, args.rounds, env=dict(os.environ))
            print(f"3 processes: 3-node virtual cluster {t_cluster:.2f} s, local {t_local:.2f} s, "
                  f"ratio {t_cluster / t_local:.3f}")
        if args.only == "cluster":
            return
        sides = {"ddpkit": cluster, "plain": plain_ssh_torchrun(vc, py)}
        took: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
        for i in range(args.rounds + 1):  # the first round warms up
            for name, argv in sides.items():
                cpu0, t0 = cpu_seconds(), time.perf_counter()
                wall(argv, dict(os.environ))
                if i:
                    took[name].append((time.perf_counter() - t0, cpu_seconds() - cpu0))
        (w_d, c_d), (w_p, c_p) = [[statistics.median(x[k] for x in took[name]) for k in (0, 1)]
                                  for name in sides]
        print(f"3 nodes: ddpkit launch {w_d:.2f} s, plain ssh + torchrun {w_p:.2f} s, "
              f"ratio {w_d / w_p:.3f} (aim <= 1.05)")
        if c_p:
            print(f"3 nodes, CPU time: ddpkit launch {c_d:.2f} s, plain ssh + torchrun "
                  f"{c_p:.2f} s, ratio {c_d / c_p:.3f}")


@contextlib.contextmanager
def cpu_cgroup():
    """Yields a function that reads the CPU seconds used so far by this process and everything
    started after it (cgroup v1 cpuacct, else v2 cpu.stat); 0.0 when neither is writable."""
    for base, usage in (("/sys/fs/cgroup/cpuacct", "cpuacct.usage"),
                        ("/sys/fs/cgroup", "cpu.stat")):
        group = os.path.join(base, f"ddpkit-bench-{os.getpid()}")
        try:
            os.mkdir(group)
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            with contextlib.suppress(OSError):
                os.rmdir(group)
            continue

        try:
            yield functools.partial(_cpu_seconds, os.path.join(group, usage))
        finally:
            with open(os.path.join(base, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            with contextlib.suppress(OSError):
                os.rmdir(group)  # busy while a leftover process remains; the kernel keeps it
        return
    yield lambda: 0.0


def _cpu_seconds(path: str) -> float:
    text = open(path).read()
    if path.endswith("cpu.stat"):
        return int(text.split("usage_usec")[1].split()[0]) / 1e6
    return int(text) / 1e9


def plain_ssh_torchrun(vc, py: str) -> list[str]:
    """`ssh node torchrun ...` to every node at once, as by hand: same script, same c10d
    rendezvous on node0, one process per node."""
    master = vc.nodes[0].ip
    calls = []
    for rank, node in enumerate(vc.nodes):
        remote = shlex.join([py, "-m", "torch.distributed.run", "--nnodes", str(len(vc.nodes)),
                             "--nproc-per-node", "1", "--node-rank", str(rank),
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{master}:29500",
                             "--rdzv-id", "plain-ssh", SCRIPT])
        calls.append(shlex.join(["ssh", "-F", str(vc.ssh_config), node.name, remote]))
    return ["sh", "-c", " & ".join(calls) + " & wait"]


if __name__ == "__main__":
    main()
