"""Diagnose a log file as a stream, or a run directory (`ddpkit launch --log-dir DIR`, a run
record): every rank<N>.log and <host>.log, each line labelled with its rank and host."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO

from ddpkit.troubleshoot.diagnose.kb import signatures
from ddpkit.troubleshoot.diagnose.matcher import Report, analyse
from ddpkit.troubleshoot.diagnose.scan import Scanner

RANK_LOG = re.compile(r"rank(\d+)\.log$")
CHUNK = 1 << 20


def feed_stream(scan: Scanner, f: IO[bytes], source: str = "", where: str = "") -> None:
    """Feed a binary stream in chunks of whole lines (memory bounded by CHUNK)."""
    number, rest = 1, b""
    while True:
        block = f.read(CHUNK)
        if not block:
            break
        block = rest + block
        cut = block.rfind(b"\n")
        if cut < 0:  # one line longer than a chunk: keep its start only
            rest = block[:CHUNK] if len(block) < 2 * CHUNK else block[:CHUNK]
            continue
        rest = block[cut + 1:]
        number = scan.feed_text(_text(block[:cut]), number, source, where)
    if rest:
        scan.feed_text(_text(rest), number, source, where)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace").replace("\r\n", "\n")


def diagnose_stream(f: IO[bytes], source: str = "", hung: bool = False) -> Report:
    sigs = signatures()
    scan = Scanner(sigs)
    feed_stream(scan, f, source=source)
    return analyse(scan, sigs, hung=hung)


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_state(directory: Path) -> str:
    """How the run ended by its record ("hung": launch --hang-timeout stopped it), or ""."""
    from ddpkit.launch.runs import read_info

    info = read_info(directory)
    return info.state if info else ""


def record_stacks(directory: Path) -> dict | None:
    """Where every rank was when the launch found the run silent (summary.json), or None."""
    stacks = _json(directory / "summary.json").get("stacks")
    return stacks if isinstance(stacks, dict) else None


def rank_hosts(directory: Path) -> dict[str, str]:
    """rank -> host from the run record's summary, where there is one."""
    out: dict[str, str] = {}
    for name in ("summary.json", "record.json"):
        data = _json(directory / name)
        for node in data.get("nodes", []):
            for rank in node.get("ranks", []) if isinstance(node, dict) else []:
                out.setdefault(str(rank), str(node.get("host", "")))
    return out


def log_files(directory: Path) -> list[Path]:
    files = [p for p in directory.iterdir() if p.suffix == ".log" and p.is_file()]
    # Ranks in numeric order, then the hosts' own logs (torchrun's lines).
    return sorted(files, key=lambda p: (not RANK_LOG.match(p.name),
                                        int(RANK_LOG.match(p.name).group(1))
                                        if RANK_LOG.match(p.name) else 0, p.name))


def diagnose_dir(directory: Path, hung: bool = False) -> Report:
    files = log_files(directory)
    hosts = rank_hosts(directory)
    sigs = signatures()
    scan = Scanner(sigs)
    for path in files:
        m = RANK_LOG.match(path.name)
        if m:
            rank = m.group(1)
            where = f"{hosts[rank]}:{rank}" if hosts.get(rank) else f"rank {rank}"
        else:
            where = path.stem
        with open(path, "rb") as f:
            feed_stream(scan, f, source=path.name, where=where)
    # a run the launch stopped as hung: its stacks outweigh the logs (an interrupted run is
    # the user's own stop, not a verdict)
    report = analyse(scan, sigs, hung=hung or record_state(directory) == "hung",
                     stacks=record_stacks(directory))
    report.first_failure["files"] = len(files)
    return report
