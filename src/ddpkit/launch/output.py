"""What a run prints and how it ends, in data: the line patterns the supervisor reads, the
per-node state, the summary of a run, and the printer that labels each line with its node and
rank (and copies it to --log-dir). No processes here: launch/supervise.py owns them."""

from __future__ import annotations

import re
import signal
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ddpkit.i18n import _
from ddpkit.launch.plan import NodePlan

MARK = "@@ddpkit-node-exit "
# torchrun's tee (with our prefix template), or horovodrun/mpirun's "[1,0]<stdout>:"
RANK_LINE = re.compile(r"^(?:\[rank(\d+)\]:|\[(?:\d+,)?(\d+)\]<std(?:out|err)>:)(.*)$", re.S)
# torchrun chatter that says nothing about the run; kept in --log-dir files, not on the console.
NOISE = re.compile(r"^\*{20,}$|^Setting OMP_NUM_THREADS environment variable for each process|"
                   r"node_rank is only used for static rdzv_backend|"
                   r"^\s*$")
EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt|Exit)\b(?::.*)?$")
ERROR_HINT = re.compile(r"terminate called|Segmentation fault|Bus error|Killed|core dumped|"
                        r"Signal \d+ \(SIG\w+\) received|error:|FAILED|Fatal|fatal", re.I)
# glog/c10 warnings ("[W1130 01:03:54.27 socket.cpp:764] ...", "W1130 ...") are not errors.
WARNING_LINE = re.compile(r"^\[?W\d{4} ")
# Errors a rank reports because another rank died first.
CONSEQUENCE = re.compile(r"Connection closed by peer|Connection reset by peer|remote worker|"
                         r"Broken pipe|[Ww]atchdog|timed out|Timeout|aborted|SIGTERM|"
                         r"was killed by SIGKILL")
# torchrun's own report of a dead worker: "failed (exitcode: -6) local_rank: 0 (pid: 12) of ..."
WORKER_DIED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+)")
# torchrun's traceback when it is signalled; during our teardown, an echo of our own stop
AGENT_SIGNALLED = re.compile(r"SignalException: Process \d+ got signal: (?P<signal>\d+)")
# the lines inside a Python traceback, before its last (unindented) exception line
TRACEBACK_BODY = re.compile(r"^(?:\s|$)|^Traceback \(most recent call last\):|"
                            r"^During handling of the above exception|"
                            r"^The above exception was the direct cause")
COLORS = ("36", "33", "35", "32", "34", "31", "96", "93", "95", "92", "94", "91")


def describe_exit(code: int, local_rank: str) -> str:
    """torchrun's report of a dead worker, in the user's language (the supervisor decides on
    the code, never on this text)."""
    if code < 0:
        try:
            return _("worker (local rank {local_rank}) was killed by {signal}").format(
                local_rank=local_rank, signal=signal.Signals(-code).name)
        except ValueError:
            return _("worker (local rank {local_rank}) was killed by signal {number}").format(
                local_rank=local_rank, number=-code)
    return _("worker (local rank {local_rank}) exited with code {code}").format(
        local_rank=local_rank, code=code)


class TeardownEcho:
    """torchrun's own lines during a teardown: a traceback is held back until its last line;
    ending in SignalException (torchrun saying it was signalled: by the teardown) it becomes one
    line, anything else is shown whole. The log file gets every line either way."""

    def __init__(self) -> None:
        self.held: list[str] = []

    def feed(self, body: str, tearing_down: bool, log_name: str) -> list[str]:
        """The lines to show on the console now, for this one."""
        if self.held:
            if TRACEBACK_BODY.match(body):
                self.held.append(body)
                return []
            held, self.held = self.held, []
            m = AGENT_SIGNALLED.search(body)
            if m:
                return [_("torchrun stopped on the teardown's signal {signal} (its traceback is "
                          "in {log} of the run record)").format(signal=m.group("signal"),
                                                                log=log_name)]
            return held + [body]
        if tearing_down and body.startswith("Traceback (most recent call last):"):
            self.held = [body]
            return []
        return [body]

    def flush(self) -> list[str]:
        """What is still held (a traceback cut off before its last line): shown as it is."""
        held, self.held = self.held, []
        return held


@dataclass
class NodeRun:
    plan: NodePlan
    color: str
    proc: Any = None  # the node's subprocess.Popen, set by the supervisor
    state: str = "pending"  # running | ok | failed | stopped | ssh_error
    exit_code: int | None = None
    first_error: str = ""
    error_at: float | None = None
    ended_at: float | None = None
    marker: dict | None = None
    ranks: set[int] = field(default_factory=set)
    agent_error: str = ""  # torchrun's own words, used only when no worker said anything
    own_stderr: deque = field(default_factory=lambda: deque(maxlen=30))  # ssh's own words
    readers: list[threading.Thread] = field(default_factory=list)
    deaths: list[tuple[int, int]] = field(default_factory=list)  # (code, pid), torchrun's words
    agent_echo: bool = False  # agent_error is a worker SIGKILLed by torchrun: another's echo
    echo: TeardownEcho = field(default_factory=TeardownEcho)  # torchrun's lines at teardown

    def to_dict(self, t0: float) -> dict:
        return {"host": self.plan.host.name, "state": self.state, "exit_code": self.exit_code,
                "nproc": self.plan.nproc, "ranks": sorted(self.ranks), "first_error": self.first_error,
                "ended_after_s": round(self.ended_at - t0, 3) if self.ended_at else None}


@dataclass(frozen=True)
class RunResult:
    nodes: tuple[dict, ...]
    exit_code: int
    first_failure: str  # host name, "" when none
    reason: str  # what ended the run: "", "failure", "SIGINT", "SIGTERM"
    duration_s: float
    log_tail: tuple[str, ...]  # labelled lines, for diagnosis
    shutdown_crash: str = ""  # the first failure came after the script's end (launch/shutdown.py)

    def to_dict(self) -> dict:
        return {"schema": 1, "exit_code": self.exit_code, "first_failure": self.first_failure,
                "reason": self.reason, "duration_s": round(self.duration_s, 3),
                "shutdown_crash": self.shutdown_crash, "nodes": list(self.nodes)}


class Printer:
    """Writes labelled lines; colour per node when the stream is a terminal."""

    def __init__(self, out: IO[str], err: IO[str], width: int, log_dir: Path | None) -> None:
        self.out, self.err, self.width = out, err, width
        self.color = {id(out): out.isatty(), id(err): err.isatty()}
        self.log_dir = log_dir
        self.files: dict[str, IO[str]] = {}
        self.lock = threading.Lock()
        if log_dir:
            log_dir.mkdir(parents=True, exist_ok=True)

    def line(self, node: NodeRun, rank: int | None, text: str, stream: IO[str],
             console: bool = True, log: bool = True) -> None:
        label = f"{node.plan.host.name}:{rank if rank is not None else '-'}"
        with self.lock:
            if self.log_dir and log:
                name = f"rank{rank}.log" if rank is not None else f"{node.plan.host.name}.log"
                f = self.files.get(name) or self.files.setdefault(name, open(self.log_dir / name, "a"))
                f.write(text + "\n")
            if not console:
                return
            padded = label.ljust(self.width)
            if self.color[id(stream)]:
                padded = f"\x1b[{node.color}m{padded}\x1b[0m"
            stream.write(f"{padded} | {text}\n")
            stream.flush()

    def close(self) -> None:
        for f in self.files.values():
            f.close()
