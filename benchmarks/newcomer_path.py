"""From bare servers to a passing `ddpkit demo -H`: ddpkit commands and wall time, against the
commands the two field guides (/work/shared/seeds) have a person type for the same nodes.

The nodes are a bare virtual cluster (tests/vcluster.py, needs root): sshd with the root
password only and empty ~/.ssh everywhere, iptables on node0 and nftables on node1/node2
dropping the rendezvous port and the ephemeral ports, and a worker venv without torch. The
launching machine has its own empty ~/.ssh; the password comes through SSH_ASKPASS, as a person
would type it once per node. torch comes from a wheel directory (`pip download torch==2.13.0`,
what one does for nodes without internet; the download is timed separately, it is not a step
on the nodes). The path is `ddpkit setup all --apply` (ssh, firewall, torch in one command),
then `ddpkit demo -H`: 2 ddpkit commands.

    sudo python benchmarks/newcomer_path.py [--nodes 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.vcluster import VCluster  # noqa: E402

PYTHON = sys.executable


def guide_route(n: int) -> list[tuple[str, str, int]]:
    """(step, the guides' command, how many times a person types it) for n nodes, CPU only
    (the guides' NCCL/driver steps are GPU-only and left out: they would add more)."""
    return [
        ("ssh key", "ssh-keygen -t rsa  (001 §3)", 1),
        ("install the key", "ssh-copy-id user@workerI  (001 §3), once per node", n),
        ("firewall", "sudo systemctl stop firewalld  (000 §1), on every node", n),
        ("torch", "pip install torch torchvision torchaudio  (001 §1), on every node", n),
        ("the job", "save ddp_demo.py  (000 §2)", 1),
        ("copy the job", "scp ddp_demo.py to every other node", n - 1),
        ("launch", "python -m torch.distributed.launch ... --node_rank=I  (000 §2), per node", n),
    ]


def ddpkit(vc: VCluster, *args: str, password: bool = False, timeout: float = 1800):
    env = dict(os.environ)
    env.pop("SSH_AUTH_SOCK", None)
    if password:
        env.update(vc.askpass_env())
    started = time.monotonic()
    done = subprocess.run(vc.client_argv([PYTHON, "-m", "ddpkit", *args]), capture_output=True,
                          text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    return done, time.monotonic() - started


def close_firewalls(vc: VCluster) -> None:
    nodes = vc.nodes
    for port in ("29500", "32768:60999"):
        nodes[0].run(["iptables", "-A", "INPUT", "-p", "tcp", "--dport", port, "-j", "DROP"],
                     check=True)
    ruleset = ("table inet filter {\n chain input {\n  type filter hook input priority 0; "
               "policy drop;\n  ct state established,related accept\n  iif \"lo\" accept\n"
               "  tcp dport 22 accept\n }\n}\n")
    for node in nodes[1:]:
        node.run(["nft", "-f", "-"], input=ruleset, check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ddpkit-newcomer-") as tmp:
        started = time.monotonic()
        subprocess.run([PYTHON, "-m", "pip", "download", "-q", "torch==2.13.0", "-d",
                        f"{tmp}/wheels"], check=True, capture_output=True)
        download_s = time.monotonic() - started
        subprocess.run([PYTHON, "-m", "venv", f"{tmp}/venv"], check=True)
        venv_py = f"{tmp}/venv/bin/python"
        with VCluster(args.nodes, bare=True, private_files=("/etc/nftables.conf",)) as vc:
            close_firewalls(vc)
            hosts = ",".join(n.name for n in vc.nodes)
            steps = [
                (("setup", "all", "-H", hosts, "--python", venv_py, "--wheel-dir",
                  f"{tmp}/wheels", "--apply"), True),
                (("demo", "-H", hosts, "--python", venv_py), False),
            ]
            rows = []
            for argv, password in steps:
                done, took = ddpkit(vc, *argv, password=password)
                rows.append((" ".join(("ddpkit",) + argv[:2]), took, done.returncode))
                if done.returncode != 0:
                    print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                    break
            again = [ddpkit(vc, *argv)[0] for argv, _ in steps[:-1]]
    print(f"newcomer path on {args.nodes} bare virtual nodes (this machine; torch wheels "
          f"downloaded beforehand in {download_s:.1f} s)")
    for what, took, rc in rows:
        print(f"  {what:<22} {took:7.1f} s  exit {rc}")
    passed = len(rows) == len(steps) and rows[-1][2] == 0
    setup = sum(1 for what, _, _ in rows if " setup " in f" {what} ")
    print(f"ddpkit: {setup} setup command{'s' if setup != 1 else ''} + the demo, {sum(t for _, t, _ in rows):.1f} s in "
          f"all; demo {'PASS' if passed else 'did not pass'}")
    same = "nothing to change: SSH, firewall and torch"  # setup all's summary when all was set
    print("second run of setup all --apply: "
          + ", ".join(f"exit {d.returncode}{' (nothing to change)' if same in d.stdout else ''}"
                      for d in again))
    manual = guide_route(args.nodes)
    print(f"the guides' manual route for the same {args.nodes} nodes:")
    for step, command, count in manual:
        print(f"  {count:2d} x {step:<16} {command}")
    total = sum(c for _, _, c in manual)
    print(f"commands typed by hand: {total}; ddpkit: {setup + 1} "
          f"(ratio {(setup + 1) / total:.2f})")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
