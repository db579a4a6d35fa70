"""How fast does `ddpkit stacks` show where every rank is? 3 nodes x 2 ranks on the namespace
virtual cluster (real sshd; needs root), a launch whose ranks sleep; `ddpkit stacks` (found
through the run record) timed as a user runs it, whole command, median of N (aim: <= 3 s).

    python benchmarks/stacks_speed.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    from tests.launching import SCRIPTS, Running
    from tests.vcluster import VCluster, missing_requirements

    why = missing_requirements()
    if why:
        raise SystemExit(f"needs the virtual cluster: {why}")
    env = {**os.environ, "DDPKIT_RUNS_DIR": tempfile.mkdtemp(prefix="ddpkit-bench-runs-")}
    with VCluster(3) as vc:
        run = Running(["launch", "--ssh-config", str(vc.ssh_config), "-H", vc.hosts_spec(2),
                       str(SCRIPTS / "sleeper.py")], env=env)
        try:
            run.ready_pids(6, timeout=120)
            took, out = [], ""
            for _ in range(args.rounds + 1):  # the first one warms the page cache
                t0 = time.perf_counter()
                done = subprocess.run([sys.executable, "-m", "ddpkit", "stacks"], env=env,
                                      capture_output=True, text=True, timeout=60)
                took.append(time.perf_counter() - t0)
                out = done.stdout
                if done.returncode != 0:
                    raise SystemExit(done.stderr)
            print(out, end="")
            floor = []
            for _ in range(args.rounds):  # what SSH alone costs here: 3 sessions at once
                t0 = time.perf_counter()
                ps = [subprocess.Popen(["ssh", "-F", str(vc.ssh_config), "-o", "BatchMode=yes",
                                        n.name, sys.executable, "-c", "pass"]) for n in vc.nodes]
                for p in ps:
                    p.wait()
                floor.append(time.perf_counter() - t0)
            print(f"floor: ssh to the 3 nodes at once running `python -c pass`: median "
                  f"{statistics.median(floor):.2f} s")
            med = statistics.median(took[1:])
            print(f"ddpkit stacks, 3 nodes x 2 ranks: median {med:.2f} s of {args.rounds} "
                  f"(min {min(took[1:]):.2f}, max {max(took[1:]):.2f}; aim <= 3 s)")
        finally:
            run.proc.send_signal(signal.SIGINT)
            try:
                run.wait(timeout=60)
            finally:
                run.kill()


if __name__ == "__main__":
    main()
