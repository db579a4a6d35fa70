"""The only place that owns child processes: start every node, label its output, tear down.

Each node runs nodeside/guard.py (locally, or through ssh) with the node's torchrun command on
its stdin. Closing that stdin is the one way to stop a node: on teardown we close it; if this
process dies, the OS closes it; if an SSH session drops, sshd closes it. The guard then
terminates the node's whole process tree.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Callable

from ddpkit.i18n import _
from ddpkit.launch.output import (
    COLORS,
    CONSEQUENCE,
    ERROR_HINT,
    EXCEPTION_LINE,
    MARK,
    NOISE,
    RANK_LINE,
    WARNING_LINE,
    WORKER_DIED,
    NodeRun,
    Printer,
    RunResult,
    describe_exit,
)
from ddpkit.launch.plan import BOOTSTRAP, TORCHRUN, Plan
from ddpkit.launch.remote import SshOptions, describe_ssh_failure, ssh_argv
from ddpkit.launch.shutdown import describe as describe_shutdown
from ddpkit.launch.shutdown import split_script_end, worker_death
from ddpkit.nodeside import source

HEARTBEAT_EVERY = 5.0  # seconds between newlines on every guard's stdin
HEARTBEAT_TIMEOUT = 30.0  # a guard that hears nothing for this long stops its node
# Reads the guard's source from stdin's first line and runs it as __main__ (stdlib only).
GUARD_LOADER = "import sys,json;exec(json.loads(sys.stdin.buffer.readline()))"
SILENT_S = 2.0  # Ctrl-C after this much silence takes the stacks before the teardown
STALL_LIMIT_S = 20.0  # taking stacks never holds a teardown longer than this


def kill_tree(pid: int) -> None:
    """SIGKILL every descendant of pid (deepest first), then pid."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)[::-1] + [root]
    except psutil.Error:
        return
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass


class Supervisor:
    def __init__(self, plan: Plan, ssh: SshOptions, printer: Printer, *, grace: float = 5.0,
                 local_python: str = sys.executable, files: dict[str, str] | None = None,
                 on_line: Callable[[str, int | None, str], None] | None = None,
                 hide: re.Pattern | None = None, json_mode: bool = False,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT, hang_timeout: float = 0.0,
                 on_stall: Callable[[str], object] | None = None, agents=None) -> None:
        self.plan, self.ssh, self.printer = plan, ssh, printer
        self.agents = agents  # the preflight's sessions, taken over by the guards (agents.py)
        self.adopted: dict[int, subprocess.Popen] = {}
        self.grace = grace
        self.heartbeat_timeout = heartbeat_timeout
        self.local_python = local_python
        self.files = dict(files or {})
        if any(BOOTSTRAP in n.argv for n in plan.nodes):
            self.files.setdefault(BOOTSTRAP.split("/", 1)[1], source("bootstrap"))
        if any(TORCHRUN in n.argv for n in plan.nodes):
            self.files.setdefault(TORCHRUN.split("/", 1)[1], source("torchrun"))
        self.on_line = on_line
        self.hide = hide  # worker lines meant for ddpkit, not for the console
        self.json_mode = json_mode
        self.nodes = [NodeRun(p, COLORS[i % len(COLORS)]) for i, p in enumerate(plan.nodes)]
        self.events: queue.Queue = queue.Queue()
        self.reason = ""
        self.first_failure: NodeRun | None = None
        self.tearing_down_at: float | None = None
        self.hard_kill = False
        self.tail: deque[str] = deque(maxlen=5000)
        self.script_ends: dict[int, tuple[int, int]] = {}  # worker pid -> (rank, exit code)
        self.stdin_lock = threading.Lock()
        self.t0 = time.monotonic()
        # --hang-timeout: no line from any node for this long is a hang; on_stall(why) takes
        # the stacks (in a thread: output keeps flowing, a second Ctrl-C still kills at once)
        self.hang_timeout, self.on_stall = hang_timeout, on_stall
        self.last_output = self.t0
        self.stall: tuple[str, float, threading.Thread] | None = None
        # [False]: on_stall found no hang after all; [N]: nor that, and asks to look again after
        # N s of further silence (a rank stepped N s before the hang timeout ran out)
        self.stall_verdict: list = []
        self.next_check_s: float | None = None  # the silence that triggers the next check

    # ---- starting -------------------------------------------------------------------------
    def _argv(self, node: NodeRun) -> list[str]:
        # The guard's source comes first on stdin (one JSON string): `ps` shows this short
        # loader and the guard's name, not kilobytes of source.
        cmd = self._guard_args()
        if node.plan.local:
            return [self.local_python, *cmd]
        return ssh_argv(node.plan.host, self.ssh, [node.plan.argv[0], *cmd])

    def _adopt(self) -> None:
        """Turn the preflight's agent on every node into that node's guard: no second SSH
        login (key exchange, login shell) per node. Nodes it fails on get a session of
        their own in _start."""
        agents = self.agents
        if agents is None:
            return
        try:
            if [n.plan.host for n in self.nodes] == list(agents.hosts):  # not horovodrun's
                self.adopted = agents.become({i: self._guard_args() for i, n in
                                              enumerate(self.nodes)
                                              if n.plan.argv[0] == agents.python})
        finally:
            agents.close()

    def _guard_args(self) -> list[str]:
        return ["-c", GUARD_LOADER, "ddpkit-guard", self.plan.run_id]

    def _start(self, node: NodeRun) -> None:
        config = {"argv": list(node.plan.argv), "env": dict(node.plan.env),
                  "cwd": node.plan.workdir, "grace": self.grace,
                  "files": self.files, "heartbeat": self.heartbeat_timeout,
                  "clean_env": node.plan.clean_env}
        argv = self._argv(node)
        adopted = self.adopted.pop(self.nodes.index(node), None)
        try:
            node.proc = adopted or subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True)  # Ctrl-C reaches us, not them
        except OSError as exc:
            node.state, node.exit_code = "failed", 127
            node.first_error = _("cannot start {program}: {strerror}").format(
                program=argv[0], strerror=exc.strerror)
            node.ended_at = time.monotonic()
            if self.first_failure is None:
                self.first_failure = node
                self._teardown("failure")
            return
        assert node.proc.stdin is not None
        node.state = "running"
        try:
            node.proc.stdin.write((json.dumps(source("guard")) + "\n").encode())
            node.proc.stdin.write((json.dumps(config) + "\n").encode())
            node.proc.stdin.flush()
        except OSError:
            pass  # it died at once; its exit is noticed and explained like any other
        for stream_name, pipe in (("out", node.proc.stdout), ("err", node.proc.stderr)):
            t = threading.Thread(target=self._read, args=(node, stream_name, pipe), daemon=True)
            t.start()
            node.readers.append(t)

    def _read(self, node: NodeRun, stream: str, pipe) -> None:
        for raw in iter(pipe.readline, b""):
            self.events.put((node, stream, raw.decode("utf-8", "replace").rstrip("\r\n")))
        pipe.close()

    # ---- output -----------------------------------------------------------------------------
    def _handle(self, node: NodeRun, stream: str, text: str) -> None:
        self.last_output = time.monotonic()
        self.next_check_s = None  # output: the next check waits the whole hang timeout again
        if text.startswith(MARK):
            try:
                node.marker = json.loads(text[len(MARK):])
            except ValueError:
                pass
            return
        m = RANK_LINE.match(text)
        rank = int(m.group(1) or m.group(2)) if m else None
        body = m.group(3) if m else text
        if m and body.startswith(f"[rank{rank}]:"):  # torch labels worker tracebacks itself
            body = body[len(f"[rank{rank}]:"):]
            body = body[1:] if body.startswith(" ") else body
        if rank is not None:
            node.ranks.add(rank)
            body, end, pid = split_script_end(body)
            if end is not None:  # the bootstrap's end-of-script line: ours, not the user's
                self.script_ends[pid or -1] = (rank, end)
                if not body:
                    return
        elif stream == "err" and not node.plan.local:
            node.own_stderr.append(body)
        if rank is None and (death := worker_death(body)):
            node.deaths.append(death)
        self.tail.append(f"{node.plan.host.name}:{rank if rank is not None else '-'} | {body}")
        self._note_error(node, rank, body)
        out = self.printer.err if (stream == "err" or self.json_mode) else self.printer.out
        quiet = (rank is None and NOISE.search(body)) or (self.hide and self.hide.search(body))
        if rank is None and not quiet:
            stopping = self.tearing_down_at is not None or bool(self.reason)
            self.printer.line(node, rank, body, out, console=False)
            for text in node.echo.feed(body, stopping, f"{node.plan.host.name}.log"):
                self.printer.line(node, rank, text, out, log=False)
        else:
            self.printer.line(node, rank, body, out, console=not quiet)
        if self.on_line:
            self.on_line(node.plan.host.name, rank, body)

    def _note_error(self, node: NodeRun, rank: int | None, body: str) -> None:
        """The first exception a worker raised is the node's error; torchrun's own report
        (ChildFailedError, exit codes) only counts when no worker said anything."""
        if WARNING_LINE.match(body):
            return
        is_exc = bool(EXCEPTION_LINE.match(body))
        if rank is None:
            died = WORKER_DIED.search(body)
            if died and not node.agent_error:
                node.agent_error = describe_exit(int(died.group("code")), died.group("local"))
                node.agent_echo = int(died.group("code")) == -signal.SIGKILL
            elif not node.agent_error and (is_exc or ERROR_HINT.search(body)) \
                    and "ChildFailedError" not in body:
                node.agent_error = body.strip()
            return
        if is_exc and not EXCEPTION_LINE.match(node.first_error or ""):
            node.first_error, node.error_at = body.strip(), time.monotonic()
        elif not node.first_error and ERROR_HINT.search(body):
            node.first_error, node.error_at = body.strip(), time.monotonic()

    def _drain(self, timeout: float) -> None:
        try:
            item = self.events.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(*item)
            try:
                item = self.events.get_nowait()
            except queue.Empty:
                return

    def _show_held(self, node: NodeRun) -> None:
        out = self.printer.err if self.json_mode else self.printer.out
        for text in node.echo.flush():
            self.printer.line(node, None, text, out, log=False)

    # ---- ending ----------------------------------------------------------------------------
    def _finish(self, node: NodeRun, rc: int) -> None:
        for t in node.readers:
            t.join(timeout=2)
        self._drain(0)
        self._show_held(node)
        node.ended_at = time.monotonic()
        if node.marker is not None:
            node.exit_code = int(node.marker.get("code", rc))
            if node.marker.get("torn_down") and self.tearing_down_at is not None:
                node.state = "stopped"
                if self._raised_on_its_own(node):
                    # its peers saw the dead connection and their torchrun exited before its
                    # own did (a poll interval and an SSH hop): it failed, torchrun's code 1
                    node.state, node.exit_code = "failed", 1
            else:
                node.state = "ok" if node.exit_code == 0 else "failed"
        elif not node.plan.local and rc == 255:
            node.state, node.exit_code = "ssh_error", rc
            fail = describe_ssh_failure("\n".join(node.own_stderr), node.plan.host)
            node.first_error = _("SSH session lost: {message}").format(message=fail.message)
        else:
            node.exit_code = rc
            node.state = "stopped" if self.tearing_down_at is not None else ("ok" if rc == 0 else "failed")
        if not node.first_error and node.state != "ok":
            node.first_error = node.agent_error
        if node.state in ("failed", "ssh_error") and self.first_failure is None and not self.reason:
            self.first_failure = node
            self._teardown("failure")

    def _teardown(self, reason: str) -> None:
        if self.tearing_down_at is not None:
            return
        self.reason = self.reason or reason
        self.tearing_down_at = time.monotonic()
        self._close_inputs()

    def _close_inputs(self) -> None:
        for node in self.nodes:
            if node.proc and node.proc.poll() is None and node.proc.stdin:
                with self.stdin_lock:
                    try:
                        node.proc.stdin.close()  # the guard's signal to stop its node
                    except OSError:
                        pass

    def request_stop(self, signum: int) -> None:
        """Called from a signal handler: first Ctrl-C tears down, a second one kills at once."""
        name = signal.Signals(signum).name
        if self.tearing_down_at is not None or (self.stall and self.stall[0] != "hang"):
            self.hard_kill = True  # also while the stacks of a first Ctrl-C are being taken
        self.reason = name if self.reason in ("", "hang") else self.reason

    def _kill_stragglers(self) -> None:
        for node in self.nodes:
            if node.proc and node.proc.poll() is None:
                if node.plan.local:
                    # torchrun's workers run in sessions of their own, under the guard: kill
                    # them before the guard, which would otherwise be the one to reap them.
                    kill_tree(node.proc.pid)
                try:
                    os.killpg(node.proc.pid, signal.SIGKILL)
                except OSError:
                    pass

    def _heartbeat(self, stop: threading.Event) -> None:
        """A newline on every guard's stdin now and then: a guard that hears nothing for
        HEARTBEAT_TIMEOUT seconds (a network partition that sshd does not notice for hours)
        stops its node on its own."""
        while not stop.wait(min(HEARTBEAT_EVERY, self.heartbeat_timeout / 3)):
            for node in self.nodes:
                if node.state != "running" or not node.proc or node.proc.stdin is None:
                    continue
                with self.stdin_lock:
                    try:
                        node.proc.stdin.write(b"\n")
                        node.proc.stdin.flush()
                    except (OSError, ValueError):
                        pass

    # ---- the run ---------------------------------------------------------------------------
    def run(self) -> RunResult:
        beat_stop = threading.Event()
        threading.Thread(target=self._heartbeat, args=(beat_stop,), daemon=True).start()
        try:
            self._adopt()
            for node in self.nodes:
                if not self.reason:
                    self._start(node)
            while any(n.state == "running" for n in self.nodes):
                self._drain(0.02)
                self._check_stall()
                for node in self.nodes:
                    if node.state == "running" and node.proc and node.proc.poll() is not None:
                        self._finish(node, node.proc.returncode)
                overdue = self.tearing_down_at is not None and \
                    time.monotonic() - self.tearing_down_at > self.grace + 5
                if self.hard_kill or overdue:
                    self._kill_stragglers()
        finally:
            beat_stop.set()
            for proc in self.adopted.values():  # taken over, never started (Ctrl-C at once)
                proc.kill()
                proc.wait()
            self._close_inputs()  # normally a no-op: every node has ended
            self._kill_stragglers_after(self.grace + 5)
            for node in self.nodes:
                self._show_held(node)
            self.printer.close()
        return self._result()

    def _check_stall(self) -> None:
        """A silent run (--hang-timeout), or Ctrl-C on a run silent for SILENT_S: take the
        stacks first (STALL_LIMIT_S at most), then tear down."""
        if self.tearing_down_at is not None:
            return
        now = time.monotonic()
        if self.stall is not None:
            why, since, worker = self.stall
            if worker.is_alive() and not self.hard_kill and now - since <= STALL_LIMIT_S:
                return
            verdict = self.stall_verdict[0] if self.stall_verdict else True
            alive = verdict is not True or self.last_output > since
            if why == "hang" and alive and self.reason == "hang" and not self.hard_kill:
                # on_stall saw a rank busy computing (loading, compiling), or the run spoke
                # again while its stacks were being taken: not a hang
                cancel = getattr(self.on_stall, "cancel", None)
                if cancel is not None:
                    cancel()  # the callback forgets what it saw
                self.reason, self.stall, self.last_output = "", None, now
                self.next_check_s = float(verdict) if verdict not in (True, False) else None
                return
            announce = getattr(self.on_stall, "announce", None)
            if why == "hang" and announce is not None and not self.hard_kill:
                announce()
            self._teardown(why)
            return
        silent = now - self.last_output
        if self.reason:
            if self.on_stall and silent >= SILENT_S and self.reason != "failure":
                self._stall(self.reason)
            else:
                self._teardown(self.reason)
        elif self.hang_timeout and silent >= (self.next_check_s or self.hang_timeout):
            self.reason = "hang"
            if self.on_stall:
                self._stall("hang")
            else:
                self._teardown("hang")

    def _stall(self, why: str) -> None:
        on_stall = self.on_stall
        assert on_stall is not None
        self.stall_verdict: list = []
        worker = threading.Thread(target=lambda: self.stall_verdict.append(on_stall(why)),
                                  daemon=True)
        worker.start()
        self.stall = (why, time.monotonic(), worker)

    def _kill_stragglers_after(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(n.proc and n.proc.poll() is None for n in self.nodes):
            time.sleep(0.05)
        self._kill_stragglers()
        for node in self.nodes:
            if node.proc:
                node.proc.wait()

    def _root_failure(self) -> NodeRun | None:
        """Of the nodes that failed on their own, the one whose workers reported an error
        first: when one rank dies its peers fail too, often before its own torchrun exits."""
        failed = [n for n in self.nodes if n.state in ("failed", "ssh_error")]
        if not failed:
            return self.first_failure
        # Output from different nodes arrives out of order (torchrun tails log files every
        # 0.1 s, then SSH), so a peer's "connection closed" can beat the real error: rank a
        # node's own error above a consequence, then by time.
        return min(failed, key=lambda n: (bool(CONSEQUENCE.search(n.first_error)) or (
                                              n.agent_echo and n.first_error == n.agent_error),
                                          n.error_at or n.ended_at or 0.0))

    @staticmethod
    def _raised_on_its_own(node: NodeRun) -> bool:
        """Its worker raised an exception of its own, not a consequence of a dead peer."""
        return bool(EXCEPTION_LINE.match(node.first_error or "")) \
            and not CONSEQUENCE.search(node.first_error)

    def _result(self) -> RunResult:
        if self.reason == "hang" and self.tearing_down_at is None:
            # a stall check was under way when every node ended by itself: not hung (the
            # verdict on a run that finished is its exit codes')
            self.reason = ""
        if self.reason in ("SIGINT", "SIGTERM", "SIGHUP"):
            code = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}[self.reason]
        elif self.first_failure is not None:
            self.first_failure = self._root_failure()
            rc = self.first_failure.exit_code or 1
            code = 1 if self.first_failure.state == "ssh_error" or rc > 255 else rc
        else:
            code = 0 if all(n.state == "ok" for n in self.nodes) else 1
        crash = describe_shutdown(self.first_failure.deaths, self.script_ends,
                                  self.plan.world_size) if self.first_failure else ""
        return RunResult(nodes=tuple(n.to_dict(self.t0) for n in self.nodes), exit_code=code,
                         first_failure=self.first_failure.plan.host.name if self.first_failure else "",
                         reason=self.reason, duration_s=time.monotonic() - self.t0,
                         log_tail=tuple(self.tail), shutdown_crash=crash)
