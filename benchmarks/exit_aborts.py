"""How often does a correct Gloo DDP script end FAILED at exit, with ddpkit's exit bootstrap and
without it (`--no-bootstrap`)?

The workload is tests/scripts/guide_ddp.py, unmodified: top-level code as the guides write it,
ending with dist.destroy_process_group(). torch 2.13 aborts such a worker at interpreter exit in
a fraction of runs (SIGABRT, "terminate called without an active exception"; README "Exit
status you can trust"). Runs alternate (bootstrap, none, bootstrap, ...) so machine noise hits
both sides alike; a run "aborts" when it does not exit 0.

    python benchmarks/exit_aborts.py [--local 100] [--cluster 30] [--cpu 10]

The cluster part (3 virtual nodes, 1 process each; needs root) is skipped with --cluster 0.
Wall times on a loaded machine are noisy, so the bootstrap's own cost is also measured as CPU
time of one process (`--cpu`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = str(ROOT / "tests" / "scripts" / "guide_ddp.py")


def once(argv: list[str]) -> tuple[bool, float, str]:
    """(aborted, seconds, why) of one launch."""
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    took = time.perf_counter() - start
    out = done.stdout + done.stderr
    if done.returncode == 0:
        return False, took, ""
    why = "SIGABRT" if ("SIGABRT" in out or "terminate called" in out) else f"exit {done.returncode}"
    if "DONE rank=" not in out:
        raise SystemExit(f"the workload did not train ({why}):\n{out[-3000:]}")
    return True, took, why


def compare(label: str, base: list[str], runs: int) -> None:
    sides = {"bootstrap": base, "no bootstrap": base[:4] + ["--no-bootstrap"] + base[4:]}
    aborts = {k: 0 for k in sides}
    times: dict[str, list[float]] = {k: [] for k in sides}
    for i in range(runs):
        for name, argv in sides.items():
            aborted, took, why = once(argv)
            aborts[name] += aborted
            times[name].append(took)
            if aborted:
                print(f"  {label} run {i + 1} {name}: {why}", flush=True)
    for name in sides:
        print(f"{label}: {name:12s} {aborts[name]:3d} of {runs} ended FAILED, median "
              f"{statistics.median(times[name]):.2f} s", flush=True)
    ratio = statistics.median(times["bootstrap"]) / statistics.median(times["no bootstrap"])
    print(f"{label}: run time with / without the bootstrap: {ratio:.3f}", flush=True)


def cpu_cost(runs: int) -> None:
    """The bootstrap's own cost, without launch noise: CPU seconds (user + sys) of one
    process running the workload as a world of one, `python S` against `python bootstrap S`."""
    import resource
    import socket

    def cpu() -> float:
        use = resource.getrusage(resource.RUSAGE_CHILDREN)
        return use.ru_utime + use.ru_stime

    boot = str(ROOT / "src" / "ddpkit" / "nodeside" / "bootstrap.py")
    sides: dict[str, list[float]] = {"bootstrap": [], "plain python": []}
    for _ in range(runs):
        for name, argv in (("bootstrap", [sys.executable, boot, SCRIPT]),
                           ("plain python", [sys.executable, SCRIPT])):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                   "MASTER_PORT": str(port)}
            before = cpu()
            subprocess.run(argv, env=env, capture_output=True, check=True, timeout=600)
            sides[name].append(cpu() - before)
    a, b = (statistics.median(v) for v in sides.values())
    print(f"1 process, CPU seconds: bootstrap {a:.3f}, plain python {b:.3f}, "
          f"difference {1000 * (a - b):+.0f} ms ({a / b:.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--local", type=int, default=100, help="local runs of each side")
    parser.add_argument("--cluster", type=int, default=30, help="3-node runs of each side")
    parser.add_argument("--cpu", type=int, default=10, help="1-process CPU-time runs of each")
    args = parser.parse_args()
    py = sys.executable
    if args.cpu:
        cpu_cost(args.cpu)
    if args.local:
        compare("local, 2 processes", [py, "-m", "ddpkit", "launch", "--nproc-per-node", "2",
                                       SCRIPT], args.local)
    if not args.cluster:
        return
    from tests.vcluster import VCluster, missing_requirements

    why = missing_requirements()
    if why:
        print(f"virtual cluster part skipped: {why}")
        return
    with VCluster(3) as vc:
        compare("3 virtual nodes", [py, "-m", "ddpkit", "launch", "--ssh-config",
                                    str(vc.ssh_config), "-H", vc.hosts_spec(1), SCRIPT],
                args.cluster)


if __name__ == "__main__":
    main()
