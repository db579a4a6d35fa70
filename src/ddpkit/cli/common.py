"""Options shared by every command that reaches other nodes: host specs and SSH tuning."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ddpkit.hosts import Host, resolve_hosts
from ddpkit.remote import SshOptions


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("hosts (default: a SLURM allocation, else this machine)")
    group.add_argument("-H", "--hosts", dest="hosts", metavar="HOST[:SLOTS],...",
                       help="e.g. node0:4,node1:4 or user@10.0.0.2:8")
    group.add_argument("--hostfile", metavar="FILE",
                       help="MPI/DeepSpeed hostfile ('node0 slots=4') or 'host:slots' lines")


def add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("ssh (the system ssh client; ~/.ssh/config applies)")
    group.add_argument("--ssh-config", metavar="FILE", help="ssh -F FILE")
    group.add_argument("--ssh-identity", metavar="FILE", help="ssh -i FILE")
    group.add_argument("--ssh-port", type=int, metavar="N", help="ssh -p N")
    group.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                       help="ssh -o KEY=VALUE (repeatable)")
    group.add_argument("--ssh-timeout", type=int, default=10, metavar="S",
                       help="ssh ConnectTimeout in seconds (default 10)")


def ssh_options(args: argparse.Namespace) -> SshOptions:
    return SshOptions(config=args.ssh_config, identity=args.ssh_identity, port=args.ssh_port,
                      options=tuple(args.ssh_option), connect_timeout=args.ssh_timeout)


def hosts_from(args: argparse.Namespace) -> tuple[list[Host], str]:
    return resolve_hosts(args.hosts, args.hostfile, os.environ)


def install_stop_handlers(callback) -> None:
    """Route Ctrl-C, SIGTERM and SIGHUP to callback(signum) (teardown) instead of raising."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: callback(signum))


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
