"""One long-lived session per node running nodeside/agent.py: the preflight asks all its
questions (probe, doctor, listen, dial) over it, so SSH and the login shell start once."""

from __future__ import annotations

import json
import queue
import threading
import time

from ddpkit.hosts import Host
from ddpkit.nodeside import source
from ddpkit.remote import LineSession, Reply, SshOptions


class Agents:
    def __init__(self, hosts: list[Host], local: list[bool], ssh: SshOptions, python: str) -> None:
        self.hosts, self.local = hosts, local
        self.sessions = [LineSession(h, ssh, [python, "-c", source("agent")], is_local)
                         for h, is_local in zip(hosts, local)]
        self.queues: list[queue.Queue] = [queue.Queue() for _ in hosts]
        self.ended: list[Reply | None] = [None] * len(hosts)  # why a session ended early
        for i in range(len(hosts)):
            threading.Thread(target=self._read, args=(i,), daemon=True).start()

    def _read(self, i: int) -> None:
        s = self.sessions[i]
        assert s.proc.stdout is not None
        for line in s.proc.stdout:
            if line.startswith("{"):
                try:
                    self.queues[i].put(json.loads(line))
                except ValueError:
                    continue
        self.queues[i].put(None)

    def alive(self, i: int) -> bool:
        return self.ended[i] is None

    def ask(self, messages: list[dict | None], timeout: float) -> list[dict | None]:
        """Send message i to node i (None: skip it) and wait for every answer in parallel."""
        for i, msg in enumerate(messages):
            if msg is not None and self.alive(i):
                try:
                    self.sessions[i].send(msg)
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
                self.ended[i] = Reply(self.hosts[i], None, "", f"no answer within {timeout:g}s")
                got = None
            if got is None and self.ended[i] is None:
                s = self.sessions[i]
                said = s.stderr()
                self.ended[i] = Reply(self.hosts[i], s.proc.returncode, "", said)
            replies.append(got)
        return replies

    def close(self) -> None:
        for s in self.sessions:
            s.close()

    def __enter__(self) -> Agents:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
