"""What does ddpkit launch cost over plain torchrun?

1. `ddpkit launch --nproc-per-node 2 S` against `torchrun --standalone --nproc-per-node 2 S`
   on this machine, alternately (aim: ratio <= 1.05).
2. A 3-node launch on the namespace virtual cluster (real sshd; needs root) against the local
   launch of the same world size, alternately.

    python benchmarks/launch_overhead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _timing import alternate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRIPT = str(ROOT / "tests" / "scripts" / "train_ddp.py")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    py = sys.executable
    torchrun = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", SCRIPT]
    ddpkit = [py, "-m", "ddpkit", "launch", "--nproc-per-node", "2", SCRIPT]
    t_ddp, t_run = alternate(ddpkit, torchrun, args.rounds)
    print(f"local, 2 processes: ddpkit launch {t_ddp:.2f} s, torchrun --standalone {t_run:.2f} s, "
          f"ratio {t_ddp / t_run:.3f} (aim <= 1.05)")

    from tests.vcluster import VCluster, missing_requirements

    why = missing_requirements()
    if why:
        print(f"virtual cluster part skipped: {why}")
        return
    with VCluster(3) as vc:
        cluster = [py, "-m", "ddpkit", "launch", "--ssh-config", str(vc.ssh_config), "-H",
                   vc.hosts_spec(1), SCRIPT]
        local3 = [py, "-m", "ddpkit", "launch", "--nproc-per-node", "3", SCRIPT]
        t_cluster, t_local = alternate(cluster, local3, args.rounds, env=dict(os.environ))
        print(f"3 processes: 3-node virtual cluster {t_cluster:.2f} s, local {t_local:.2f} s, "
              f"ratio {t_cluster / t_local:.3f}")


if __name__ == "__main__":
    main()
