"""Crashes after the script: the bootstrap (nodeside/bootstrap.py) prints one marker line when
a worker's script, its atexit handlers and the process group's teardown are done. A worker
that dies after that line crashed in the interpreter's own shutdown, not in training; the
summary says so (README, "Exit status you can trust"). Pure: the supervisor feeds it lines.
"""

from __future__ import annotations

import re
import signal

from ddpkit.i18n import _

SCRIPT_END = "@@ddpkit-script-end "
_END = re.compile(re.escape(SCRIPT_END) + r"(-?\d+)(?: (\d+))?\s*$")
# torchrun's report of a dead worker, with its pid
DIED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) "
                  r"\(pid: (?P<pid>\d+)\)")


def split_script_end(body: str) -> tuple[str, int | None, int | None]:
    """(text before the marker, exit code, pid) of a worker line; (body, None, None) when the
    line carries no marker (a script's stderr may lack a final newline: text can precede it)."""
    m = _END.search(body)
    if not m:
        return body, None, None
    return body[:m.start()], int(m.group(1)), int(m.group(2)) if m.group(2) else None


def worker_death(line: str) -> tuple[int, int] | None:
    """(exit code, pid) from torchrun's 'failed (exitcode: -6) local_rank: 1 (pid: 123)'."""
    m = DIED.search(line)
    return (int(m.group("code")), int(m.group("pid"))) if m else None


def _how(code: int) -> str:
    if code < 0:
        try:
            return _("killed by {signal}").format(signal=signal.Signals(-code).name)
        except ValueError:
            return _("killed by signal {n}").format(n=-code)
    return _("exit code {code}").format(code=code)


def describe(deaths: list[tuple[int, int]], ends: dict[int, tuple[int, int]],
             world_size: int) -> str:
    """The summary's sentence when the node's last dead worker had finished its script with
    code 0, else "". deaths: (code, pid) of the failed node's dead workers, in order; ends:
    pid -> (rank, code) of every end marker of the run."""
    dead = next(((code, pid) for code, pid in reversed(deaths) if code != 0), None)
    if dead is None or ends.get(dead[1], (0, 1))[1] != 0:
        return ""
    rank = ends[dead[1]][0]
    finished = {r for r, code in ends.values() if code == 0}
    how = _how(dead[0])
    if len(finished) >= world_size:
        return _("all ranks finished training; rank {rank} crashed during interpreter shutdown "
                 "({how})").format(rank=rank, how=how)
    missing = sorted(set(range(world_size)) - finished)
    return _("rank {rank} finished its script, then crashed during interpreter shutdown "
             "({how}); ranks {missing} had not reported the end of their script").format(
                 rank=rank, how=how, missing=", ".join(map(str, missing)))
