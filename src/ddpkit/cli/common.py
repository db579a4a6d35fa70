"""Options shared by every command that reaches other nodes: host specs and SSH tuning."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ddpkit.errors import UsageError
from ddpkit.launch.hosts import Host, resolve_hosts
from ddpkit.launch.remote import SshOptions


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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def install_stop_handlers(callback) -> dict:
    """Route Ctrl-C, SIGTERM and SIGHUP to callback(signum) (teardown) instead of raising;
    returns the previous handlers for restore_handlers()."""
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, frame: callback(signum))
    return previous


def restore_handlers(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def writable_dir(path: str | None, flag: str) -> None:
    """Fail before any work when an output directory cannot be created."""
    if not path:
        return
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {exc.strerror}", "give a directory you can write to") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {path}: not writable", "give a directory you can write to")


def writable_file(path: str | None, flag: str) -> None:
    if path:
        writable_dir(os.path.dirname(os.path.abspath(path)), flag)


def positive(kind=float):
    """argparse type: a number > 0 (kind=int or float)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{text} must be greater than 0")
        return value
    return parse


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be 0 or more")
    return value


def tcp_port(text: str) -> int:
    """argparse type: a TCP port number."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return int(text)


def add_run_arguments(parser) -> None:
    """What every command that starts a run on the nodes takes (launch, demo, bench)."""
    parser.add_argument("--port", type=tcp_port, default=29500, metavar="N",
                        help="rendezvous port on the first host (default 29500)")
    parser.add_argument("--python", metavar="PATH",
                        help=f"interpreter on every node (default: this one, {sys.executable})")
    parser.add_argument("--log-dir", metavar="DIR", help="also write one log file per rank here")
    parser.add_argument("--grace", type=non_negative, default=5.0, metavar="S",
                        help="seconds between TERM and KILL at teardown (default 5)")


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
