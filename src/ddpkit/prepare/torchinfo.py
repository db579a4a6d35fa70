"""Learn torch's build facts without `import torch` (which costs ~1.5 s).

Reads torch/version.py, the metadata of the NVIDIA wheels torch depends on, and the
dynamic section of libtorch_cpu.so. Used by the doctor; never imports torch.
"""

from __future__ import annotations

import ctypes
import importlib.metadata as md
import importlib.util
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping


@dataclass(frozen=True)
class TorchFacts:
    installed: bool
    version: str = ""
    cuda: str = ""  # CUDA the wheel was built for; "" for a CPU build
    hip: str = ""
    cudnn: str = ""
    nccl: str = ""
    backends: Mapping[str, bool] = field(default_factory=dict)
    location: str = ""

    def to_dict(self) -> dict:
        return {"installed": self.installed, "version": self.version, "cuda": self.cuda,
                "hip": self.hip, "cudnn": self.cudnn, "nccl": self.nccl,
                "backends": dict(self.backends), "location": self.location}


_FIELD = re.compile(r"^(?P<key>__version__|cuda|hip)\b[^=]*=\s*(?P<value>.+)$", re.M)


def parse_version_py(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in _FIELD.finditer(text):
        value = m.group("value").strip()
        out[m.group("key")] = "" if value == "None" else value.strip("'\"")
    return out


def _dist_version(*names: str) -> str:
    for name in names:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            continue
    return ""


def elf_needed(path: Path) -> list[str]:
    """DT_NEEDED entries of a 64-bit little-endian ELF file; [] when it cannot be read."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
                return []
            phoff, = struct.unpack_from("<Q", ident, 32)
            phentsize, phnum = struct.unpack_from("<HH", ident, 54)
            f.seek(phoff)
            phdrs = [struct.unpack("<IIQQQQQQ", f.read(phentsize)[:56]) for _ in range(phnum)]
            loads = [(p[3], p[2], p[5]) for p in phdrs if p[0] == 1]  # vaddr, offset, filesz
            dyn = next((p for p in phdrs if p[0] == 2), None)
            if dyn is None:
                return []
            f.seek(dyn[2])
            raw = f.read(dyn[5])
            entries = [struct.unpack_from("<qQ", raw, i) for i in range(0, len(raw) - 15, 16)]
            strtab = next((v for t, v in entries if t == 5), None)
            if strtab is None:
                return []
            base = next((off + strtab - va for va, off, size in loads if va <= strtab < va + size), None)
            names = []
            for tag, val in entries:
                if tag == 0:
                    break
                if tag == 1 and base is not None:
                    f.seek(base + val)
                    names.append(f.read(256).split(b"\0", 1)[0].decode(errors="replace"))
            return names
    except (OSError, struct.error):
        return []


def _nccl_from_library(dirs: list[Path]) -> str:
    for d in dirs:
        for lib in sorted(d.glob("libnccl.so*")):
            try:
                handle = ctypes.CDLL(str(lib))
                version = ctypes.c_int()
                if handle.ncclGetVersion(ctypes.byref(version)) == 0:
                    v = version.value
                    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch; older major*1000 + ...
                    major, rest = (v // 10000, v % 10000) if v >= 20900 else (v // 1000, v % 1000)
                    return f"{major}.{rest // 100}.{rest % 100}"
            except (OSError, AttributeError):
                continue
    return ""


def torch_facts() -> TorchFacts:
    spec = importlib.util.find_spec("torch")  # locates the package without executing it
    if spec is None or not spec.submodule_search_locations:
        return TorchFacts(installed=False)
    root = Path(list(spec.submodule_search_locations)[0])
    try:
        fields = parse_version_py((root / "version.py").read_text())
    except OSError:
        fields = {}
    cuda, hip = fields.get("cuda", ""), fields.get("hip", "")
    major = cuda.split(".")[0] if cuda else ""
    cudnn = _dist_version(f"nvidia-cudnn-cu{major}") if major else ""
    cudnn = ".".join(cudnn.split(".")[:3])
    nccl = ""
    if cuda:
        nccl = _dist_version(f"nvidia-nccl-cu{major}", "nvidia-nccl")
        if not nccl:
            nvidia = root.parent / "nvidia"
            nccl = _nccl_from_library([root / "lib", nvidia / "nccl" / "lib"])
    needed = elf_needed(root / "lib" / "libtorch_cpu.so") if sys.platform == "linux" else []
    backends = {
        "gloo": sys.platform != "win32",
        "nccl": bool(cuda or hip),
        "mpi": any(name.startswith("libmpi") for name in needed),
    }
    return TorchFacts(installed=True, version=fields.get("__version__", ""), cuda=cuda, hip=hip,
                      cudnn=cudnn, nccl=nccl, backends=backends, location=str(root))
