"""nvidia-smi output -> driver, CUDA and per-GPU facts.

Two formats: the full `nvidia-smi -q` report (preferred: names are not truncated) and the
default boxed table (what users paste). Both are stable across driver generations in the
fields read here; see tests/fixtures/gpu for recorded outputs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_total_mib: int | None = None
    uuid: str = ""
    bus_id: str = ""

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "memory_total_mib": self.memory_total_mib,
                "uuid": self.uuid, "bus_id": self.bus_id}


@dataclass(frozen=True)
class SmiReport:
    driver_version: str = ""
    cuda_version: str = ""  # the newest CUDA the driver supports
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"driver_version": self.driver_version, "cuda_version": self.cuda_version,
                "gpus": [g.to_dict() for g in self.gpus]}


_KV = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?)\s*:\s?(?P<value>.*)$")
_MIB = re.compile(r"(\d+)\s*MiB")
_VERSION = re.compile(r"\d+(\.\d+)*")
_GPU_BLOCK = re.compile(r"^GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]\s*$")


def parse_smi_query(text: str) -> SmiReport:
    """Parse `nvidia-smi -q`: top-level driver/CUDA, then one block per 'GPU <bus id>' line."""
    driver = cuda = ""
    gpus: list[dict] = []
    stack: list[tuple[int, str]] = []  # (indent, section name) of the current GPU block
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("="):
            continue
        if _GPU_BLOCK.match(raw):
            gpus.append({"bus_id": raw[4:].strip()})
            stack = []
            continue
        indent = len(raw) - len(raw.lstrip())
        m = _KV.match(raw)
        if not m:
            # a section header without a value, e.g. "    FB Memory Usage"
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, raw.strip()))
            continue
        key, value = m.group("key").strip(), m.group("value").strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        section = stack[-1][1] if stack else ""
        if not gpus:
            # Drivers >= 610 rename these to "KMD Version" / "CUDA UMD Version" and mark the
            # old keys deprecated ("610.57.04 [Deprecated; ...]"): take the number from either.
            number = _VERSION.match(value)
            if key in ("Driver Version", "KMD Version") and number and not driver:
                driver = number.group(0)
            elif key in ("CUDA Version", "CUDA UMD Version") and number and not cuda:
                cuda = number.group(0)
            continue
        gpu = gpus[-1]
        if not section and key == "Product Name":
            gpu["name"] = value
        elif not section and key == "GPU UUID":
            gpu["uuid"] = value
        elif not section and key == "Minor Number" and value.isdigit():
            gpu["minor"] = int(value)
        elif section == "FB Memory Usage" and key == "Total":
            mib = _MIB.search(value)
            gpu["memory"] = int(mib.group(1)) if mib else None
    infos = tuple(
        GpuInfo(index=i, name=g.get("name", ""), memory_total_mib=g.get("memory"),
                uuid=g.get("uuid", ""), bus_id=g.get("bus_id", ""))
        for i, g in enumerate(gpus)
    )
    return SmiReport(driver_version=driver, cuda_version=cuda, gpus=infos)


_HEADER = re.compile(r"(?:Driver|KMD) Version:\s*(?P<driver>[\d.]+)(?:.*?CUDA (?:UMD )?Version:\s*(?P<cuda>[\d.]+|N/A))?")
_ROW = re.compile(r"^\|\s+(?P<idx>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)")
_MEM = re.compile(r"(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB")


def parse_smi_table(text: str) -> SmiReport:
    """Parse the default `nvidia-smi` table. GPU names may be truncated by the table."""
    driver = cuda = ""
    gpus: list[GpuInfo] = []
    pending: dict | None = None
    for line in text.splitlines():
        h = _HEADER.search(line)
        if h and not driver:
            driver = h.group("driver")
            cuda = h.group("cuda") or ""
            continue
        r = _ROW.match(line)
        if r:
            pending = {"index": int(r.group("idx")), "name": r.group("name").strip(),
                       "bus_id": r.group("bus")}
            continue
        if pending is not None:
            m = _MEM.search(line)
            gpus.append(GpuInfo(index=pending["index"], name=pending["name"],
                                memory_total_mib=int(m.group("total")) if m else None,
                                bus_id=pending["bus_id"]))
            pending = None
    return SmiReport(driver_version=driver, cuda_version=cuda if cuda != "N/A" else "",
                     gpus=tuple(gpus))
