"""torchrun's command-line habits: its spellings where ddpkit means the same, and an answer
for the per-node flags, which ddpkit replaces by starting every node from one command."""

from __future__ import annotations

import argparse
import shlex

from ddpkit.errors import UsageError
from ddpkit.i18n import _

# torchrun's per-node rendezvous flags (torch/distributed/run.py), both spellings.
PER_NODE = ("nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "rdzv_backend",
            "rdzv_id", "standalone")
NPROC_WORDS = ("gpu", "cpu", "auto")
LOCAL = ("localhost", "127.0.0.1", "::1", "localhost.localdomain")
DEFAULT_NODES = 2  # -H example size when --nnodes was not given


def nproc_value(text: str) -> int | str:
    """argparse type for --nproc-per-node: a number, or torchrun's gpu | cpu | auto."""
    if text in NPROC_WORDS:
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("'{text}' is not a number or one of {words}").format(
                text=text, words=", ".join(NPROC_WORDS))) from None
    if value < 1:
        raise argparse.ArgumentTypeError(_("{text} must be at least 1").format(text=text))
    return value


class _Record(argparse.Action):
    """Keeps (flag, value) of a torchrun per-node flag for torchrun_flags() to answer."""

    def __call__(self, parser, namespace, values, option_string=None):
        seen = list(getattr(namespace, "torchrun_flags", None) or [])
        seen.append((self.dest.replace("torchrun_", ""), values))
        namespace.torchrun_flags = seen


def add_per_node_flags(parser: argparse.ArgumentParser) -> None:
    """Hidden: accepted so that they can be answered, not ignored."""
    parser.set_defaults(torchrun_flags=[])
    for name in PER_NODE:
        flags = [f"--{name.replace('_', '-')}", f"--{name}"]
        nargs = 0 if name == "standalone" else None
        parser.add_argument(*dict.fromkeys(flags), dest=f"torchrun_{name}", action=_Record,
                            nargs=nargs, help=argparse.SUPPRESS)


def accept_or_refuse(flags: list[tuple[str, object]], argv: list[str],
                     script_args: list[str], nhosts: int) -> int | None:
    """On one node, flags that say what a one-node run does anyway (torchrun --nnodes 1
    --node_rank 0 --master_addr 127.0.0.1 --master_port 29501, --standalone) are accepted:
    returns the port they name (None: none). Else exit 2 with ddpkit's way to say it."""
    values = {name: str(value) for name, value in flags}
    endpoint = values.get("rdzv_endpoint", "")
    host, _unused, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    one_node = nhosts == 1 and all((
        values.get("nnodes", "1") in ("1", "1:1"),
        values.get("node_rank", "0") == "0",
        values.get("master_addr", "localhost") in LOCAL,
        (host.strip("[]") or "localhost") in LOCAL,
    ))
    if one_node:
        chosen = values.get("master_port") or port
        return int(chosen) if chosen.isdigit() else None
    names = ", ".join(dict.fromkeys(f"--{n}" for n, _unused in flags))
    if set(values) <= {"standalone", "rdzv_backend", "rdzv_id"}:
        raise UsageError(_('{names}: a one-node rendezvous, but the run has {nhosts} hosts').format(names=names, nhosts=nhosts),
                         f"drop {names}: {equivalent(flags, argv, script_args)}")
    raise UsageError(
        _('{names}: ddpkit starts every node from here: give the nodes with -H node0:4,node1:4; it picks the master address and the ranks').format(names=names),
        "instead: " + equivalent(flags, argv, script_args))


def equivalent(flags: list[tuple[str, object]], argv: list[str], script_args: list[str]) -> str:
    """The ddpkit launch command that does what the torchrun-style command meant."""
    values = {name: value for name, value in flags}
    head = argv[:len(argv) - len(script_args) - 1] if argv else []
    tail = argv[len(head):] if argv else []
    kept, skip = [], False
    per_node = {f"--{n}" for n in PER_NODE} | {f"--{n.replace('_', '-')}" for n in PER_NODE}
    nproc = ""
    for i, tok in enumerate(head):
        if skip:
            skip = False
            continue
        flag = tok.split("=", 1)[0]
        if flag in ("--nproc-per-node", "--nproc_per_node"):
            nproc = tok.split("=", 1)[1] if "=" in tok else (head[i + 1] if i + 1 < len(head) else "")
        if flag in per_node:
            skip = "=" not in tok and flag not in ("--standalone",)
            continue
        kept.append(tok)
    slots = f":{nproc}" if nproc.isdigit() else ""
    endpoint = str(values.get("rdzv_endpoint") or "")
    first, _unused, port = endpoint.rpartition(":") if ":" in endpoint else (endpoint, "", "")
    first = str(values.get("master_addr") or first or "node0")
    port = str(values.get("master_port") or port or "")
    count = str(values.get("nnodes", "")).split(":")[-1]
    nnodes = int(count) if count.isdigit() and int(count) > 1 else DEFAULT_NODES
    spec = ",".join([f"{first}{slots}"] + [f"node{i}{slots}" for i in range(1, nnodes)])
    given = any(t.split("=", 1)[0] in ("-H", "--hosts", "--hostfile") for t in kept)
    parts = ["ddpkit", "launch"] + ([] if given else ["-H", spec])
    parts += (["--port", port] if port else []) + kept + tail
    return shlex.join(parts)
