"""Run a short external command (nvidia-smi, iptables, ...) and capture what it said.

Probes must never raise: a missing tool or a timeout is a fact to report, not a crash.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from ddpkit.i18n import _


@dataclass(frozen=True)
class CmdResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: not found or timed out
    stdout: str = ""
    stderr: str = ""
    error: str = ""  # "not found", "timed out after 3s", "permission denied", ...

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def to_dict(self) -> dict:
        return {"argv": list(self.argv), "returncode": self.returncode,
                "stdout": self.stdout, "stderr": self.stderr, "error": self.error}


# sbin dirs are not on a normal user's PATH on CentOS, but iptables and firewall-cmd live there.
_EXTRA_PATH = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def which(name: str) -> str | None:
    path = os.environ.get("PATH", "") + os.pathsep + os.pathsep.join(_EXTRA_PATH)
    return shutil.which(name, path=path)


def run_cmd(argv: list[str], timeout: float | None = 5.0,
            env: dict[str, str] | None = None) -> CmdResult:
    exe = which(argv[0])
    if exe is None:
        return CmdResult(tuple(argv), None, error="not found")
    try:
        done = subprocess.run(
            [exe, *argv[1:]], capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL, env=env, errors="replace",
        )
    except subprocess.TimeoutExpired:
        return CmdResult(tuple(argv), None, error=_("timed out after {timeout:g}s").format(
            timeout=timeout or 0))
    except OSError as exc:
        return CmdResult(tuple(argv), None, error=exc.strerror or str(exc))
    return CmdResult(tuple(argv), done.returncode, done.stdout, done.stderr)
