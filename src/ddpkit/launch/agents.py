"""One long-lived session per node running nodeside/agent.py: the preflight asks all its
questions (probe, doctor, listen, dial) over it, so SSH and the login shell start once."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

from ddpkit.i18n import _
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import LineSession, Reply, SshOptions
from ddpkit.nodeside import source


class Agents:
    def __init__(self, hosts: list[Host], local: list[bool], ssh: SshOptions, python: str) -> None:
        self.hosts, self.local, self.python = hosts, local, python
        self.queues: list[queue.Queue] = [queue.Queue() for _ in hosts]
        self.ended: list[Reply | None] = [None] * len(hosts)  # why a session ended early
        self.sessions: list[LineSession | None] = []
        argv = [python, "-c", source("agent")]
        for i, (host, is_local) in enumerate(zip(hosts, local)):
            try:
                self.sessions.append(LineSession(host, ssh, argv, is_local))
            except OSError as exc:  # no such interpreter here, or no ssh client
                self.sessions.append(None)
                what = argv[0] if is_local else "ssh"
                self.ended[i] = Reply(host, 127, "", f"cannot run {what}: {exc.strerror}")
        for i, s in enumerate(self.sessions):
            if s is not None:
                threading.Thread(target=self._read, args=(i,), daemon=True).start()

    def _read(self, i: int) -> None:
        s = self.sessions[i]
        assert s is not None and s.proc.stdout is not None
        for line in s.proc.stdout:
            if line.startswith("{"):
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                self.queues[i].put(msg)
                if msg.get("became"):
                    return  # the session belongs to the program the agent became
        self.queues[i].put(None)

    def alive(self, i: int) -> bool:
        return self.ended[i] is None

    def ask(self, messages: list[dict | None], timeout: float) -> list[dict | None]:
        """Send message i to node i (None: skip it) and wait for every answer in parallel."""
        for i, msg in enumerate(messages):
            session = self.sessions[i]
            if msg is not None and self.alive(i) and session is not None:
                try:
                    session.send(msg)
                except OSError:
                    pass  # the reader sees the end and records why
        deadline = time.monotonic() + timeout
        replies: list[dict | None] = []
        for i, msg in enumerate(messages):
            if msg is None or not self.alive(i):
                replies.append(None)
                continue
            try:
                got = self.queues[i].get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.ended[i] = Reply(self.hosts[i], None, "",
                                      _("no answer within {timeout:g}s").format(timeout=timeout))
                got = None
            s = self.sessions[i]
            if got is None and self.ended[i] is None and s is not None:
                said = s.stderr()
                self.ended[i] = Reply(self.hosts[i], s.proc.returncode, "", said)
            replies.append(got)
        return replies

    def become(self, argvs: dict[int, list[str]], timeout: float = 10) -> dict[int, subprocess.Popen]:
        """Node i's session taken over by `python argvs[i]` (the agent execs it), all nodes at
        once: {i: its process, with binary stdin/stdout/stderr}. A node missing from the
        answer could not be handed over (the caller starts a session of its own)."""
        messages: list[dict | None] = [None] * len(self.hosts)
        for i, argv in argvs.items():
            s = self.sessions[i]
            if s is not None and self.alive(i) and s.proc.poll() is None:
                messages[i] = {"op": "become", "argv": argv}
        out: dict[int, subprocess.Popen] = {}
        for i, got in enumerate(self.ask(messages, timeout)):
            s = self.sessions[i]
            if not got or not got.get("became") or s is None:
                continue
            self.sessions[i] = None  # ours no more: close() must not end it
            # binary pipes from here on; detach() (not a dropped wrapper) keeps them open
            for name in ("stdin", "stdout", "stderr"):
                stream = getattr(s.proc, name)
                if stream is not None:
                    setattr(s.proc, name, stream.detach())
            out[i] = s.proc
        return out

    def close(self) -> None:
        for s in self.sessions:
            if s is not None:
                s.close()

    def __enter__(self) -> Agents:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
