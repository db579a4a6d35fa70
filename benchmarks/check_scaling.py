"""Wall time of `ddpkit check` on 2 and on 8 virtual nodes (namespaces with sshd; needs root).

Every node is probed in parallel and all node pairs are dialled at once, so 8 nodes (56 peer
links) should cost little more than 2. Aim: t(8) / t(2) <= 1.5.

On this 2-core machine all virtual nodes share the same two CPUs, and every SSH session costs
CPU (key exchange, the login shell's rc files, the interpreter's start-up), so the floor that any
SSH-based tool meets is printed too: `ssh NODE python -c pass` to all nodes in parallel.

    python benchmarks/check_scaling.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed_check(vc, nodes) -> float:
    argv = [sys.executable, "-m", "ddpkit", "check", "--ssh-config", str(vc.ssh_config), "-H",
            vc.hosts_spec(1, nodes), "--json"]
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"check failed on {len(nodes)} nodes: {done.stdout[-2000:]} {done.stderr[-2000:]}")
    return took


def timed_floor(vc, nodes) -> float:
    start = time.perf_counter()
    procs = [subprocess.Popen(["ssh", "-F", str(vc.ssh_config), n.name, sys.executable, "-c", "pass"])
             for n in nodes]
    for p in procs:
        p.wait()
    return time.perf_counter() - start


def main() -> None:
    from tests.vcluster import VCluster, missing_requirements

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    why = missing_requirements()
    if why:
        raise SystemExit(f"needs the virtual cluster: {why}")
    with VCluster(8) as vc:
        two, eight = vc.nodes[:2], vc.nodes
        timed_check(vc, two)  # warm-up
        t2, t8, f2, f8 = [], [], [], []
        for _ in range(args.rounds):
            t2.append(timed_check(vc, two))
            t8.append(timed_check(vc, eight))
            f2.append(timed_floor(vc, two))
            f8.append(timed_floor(vc, eight))
    m2, m8 = statistics.median(t2), statistics.median(t8)
    g2, g8 = statistics.median(f2), statistics.median(f8)
    print(f"ddpkit check, 2 nodes: median {m2:.2f} s")
    print(f"ddpkit check, 8 nodes: median {m8:.2f} s")
    print(f"ratio 8/2 nodes: {m8 / m2:.2f}  (aim <= 1.5)")
    print(f"floor, parallel 'ssh NODE python -c pass': 2 nodes {g2:.2f} s, 8 nodes {g8:.2f} s, "
          f"ratio {g8 / g2:.2f}")
    print(f"check's own time above the floor: 2 nodes {m2 - g2:.2f} s, 8 nodes {m8 - g8:.2f} s")


if __name__ == "__main__":
    main()
