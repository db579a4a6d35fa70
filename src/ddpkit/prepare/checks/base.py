"""What a check sees (Snapshot, gathered once by collect.py) and what it returns (CheckResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Mapping, Union

from ddpkit.parsers.nvsmi import SmiReport
from ddpkit.parsers.osrelease import OsInfo
from ddpkit.prepare.torchinfo import TorchFacts


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


# Problems first when rendering.
STATUS_ORDER = {Status.FAIL: 0, Status.WARN: 1, Status.OK: 2, Status.SKIP: 3}


@dataclass(frozen=True)
class CheckResult:
    id: str
    status: Status
    summary: str
    detail: str = ""
    hint: str = ""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    def to_dict(self) -> dict:
        return {"id": self.id, "status": self.status.value, "summary": self.summary,
                "detail": self.detail, "hint": self.hint}


@dataclass(frozen=True)
class Iface:
    name: str
    ipv4: tuple[str, ...]  # "10.0.0.5/24"
    up: bool = True

    def to_dict(self) -> dict:
        return {"name": self.name, "ipv4": list(self.ipv4), "up": self.up}


@dataclass(frozen=True)
class SshFacts:
    client: str = ""  # path of ssh, "" when missing
    home: str = ""
    dir_mode: int | None = None  # ~/.ssh permission bits, None when missing
    authorized_keys_mode: int | None = None
    private_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """Everything the checks judge, gathered in one concurrent pass. Pure data."""

    hostname: str = ""
    hostname_addrs: tuple[str, ...] = ()
    hostname_error: str = ""
    python_version: str = ""
    python_executable: str = ""
    in_venv: bool = False
    conda_env: str = ""
    os: OsInfo = field(default_factory=OsInfo)
    kernel: str = ""
    torch: TorchFacts = field(default_factory=lambda: TorchFacts(installed=False))
    gpu: SmiReport | None = None  # None: no NVIDIA driver/tool found
    gpu_source: str = ""  # "nvml" or "nvidia-smi"
    gpu_error: str = ""
    interfaces: tuple[Iface, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    master_port: int = 29500
    port_bind_error: str = ""  # "" when the port is free here
    firewall: Mapping[str, str] = field(default_factory=dict)  # raw outputs by front-end
    firewall_unreadable: str = ""  # why rules could not be read (not root, ...)
    master_addr_resolved: tuple[str, ...] = ()
    master_addr_error: str = ""
    shm_bytes: int | None = None
    nofile: tuple[int, int] | None = None
    memlock: tuple[int, int] | None = None
    cpu_count: int = 1
    ssh: SshFacts = field(default_factory=SshFacts)
    companions: Mapping[str, str] = field(default_factory=dict)
    is_root: bool = False


CheckFn = Callable[[Snapshot], Union[CheckResult, "list[CheckResult]"]]
