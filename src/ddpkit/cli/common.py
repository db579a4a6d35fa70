"""Options shared by every command that reaches other nodes: host specs and SSH tuning."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ddpkit.errors import UsageError
from ddpkit.i18n import _
from ddpkit.launch.hosts import Host, resolve_hosts
from ddpkit.launch.remote import SshOptions


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(_('hosts (default: a SLURM allocation, else this machine)'))
    group.add_argument("-H", "--hosts", dest="hosts", metavar="HOST[:SLOTS],...",
                       help=_('e.g. node0:4,node1:4 or user@10.0.0.2:8'))
    group.add_argument("--hostfile", metavar="FILE",
                       help=_("MPI/DeepSpeed hostfile ('node0 slots=4') or 'host:slots' lines"))


def add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(_('ssh (the system ssh client; ~/.ssh/config applies)'))
    group.add_argument("--ssh-config", metavar="FILE", help=_('ssh -F FILE'))
    group.add_argument("--ssh-identity", metavar="FILE", help=_('ssh -i FILE'))
    group.add_argument("--ssh-port", type=int, metavar="N", help="ssh -p N")
    group.add_argument("--ssh-option", action="append", default=[], metavar="KEY=VALUE",
                       help=_('ssh -o KEY=VALUE (repeatable)'))
    group.add_argument("--ssh-timeout", type=int, default=10, metavar="S",
                       help=_('ssh ConnectTimeout in seconds (default 10)'))


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
        raise UsageError(f"{flag} {path}: {exc.strerror}", _('give a directory you can write to')) from None
    if not os.access(path, os.W_OK):
        raise UsageError(_('{flag} {path}: not writable').format(flag=flag, path=path), _('give a directory you can write to'))


def writable_file(path: str | None, flag: str) -> None:
    if path:
        writable_dir(os.path.dirname(os.path.abspath(path)), flag)


def positive(kind=float):
    """argparse type: a number > 0 (kind=int or float)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(_("'{text}' is not a number").format(text=text)) from None
        if value <= 0:
            raise argparse.ArgumentTypeError(_("{text} must be greater than 0").format(text=text))
        return value
    return parse


def non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(_("'{text}' is not a number").format(text=text)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(_("{text} must be 0 or more").format(text=text))
    return value


def tcp_port(text: str) -> int:
    """argparse type: a TCP port number."""
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (1-65535)")
    return int(text)


DEFAULT_PORT = 29500


def port_from(args: argparse.Namespace, environ=None) -> tuple[int, bool]:
    """(rendezvous port, whether the user chose it): --port, else MASTER_PORT (the variable
    torchrun users and `ddpkit doctor`'s fixes set), else 29500."""
    environ = os.environ if environ is None else environ
    if getattr(args, "port", None) is not None:
        return args.port, True
    raw = environ.get("MASTER_PORT", "").strip()
    if not raw:
        return DEFAULT_PORT, False
    try:
        return tcp_port(raw), True
    except argparse.ArgumentTypeError:
        raise UsageError(_('MASTER_PORT={raw} is not a TCP port (1-65535)').format(raw=raw),
                         _('export MASTER_PORT=29500, or unset it and give --port N')) from None


def add_run_arguments(parser) -> None:
    """What every command that starts a run on the nodes takes (launch, demo, bench)."""
    parser.add_argument("--port", type=tcp_port, default=None, metavar="N",
                        help=_('rendezvous port on the first host (default: $MASTER_PORT, else 29500; a one-node run takes a free port unless one is given)'))
    parser.add_argument("--python", metavar="PATH",
                        help=_('interpreter on every node (default: this one, {executable})').format(executable=sys.executable))
    parser.add_argument("--log-dir", "--log_dir", metavar="DIR", help=_('also write one log file per rank here'))
    parser.add_argument("--grace", type=non_negative, default=5.0, metavar="S",
                        help=_('seconds between TERM and KILL at teardown (default 5)'))


def err(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()
