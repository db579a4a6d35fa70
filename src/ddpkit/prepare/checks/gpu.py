"""GPUs, driver, and whether the driver can run this torch's CUDA build."""

from __future__ import annotations

import re

from ddpkit.data import load_toml
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status
from ddpkit.prepare.checks.util import install_cmd, vtuple

# CUDA variants of the official wheels, newest first (download.pytorch.org/whl/cuXXX).
WHEEL_CUDA = ("13.0", "12.9", "12.8", "12.6", "12.4", "12.1", "11.8")


def wheel_for_driver_cuda(driver_cuda: str) -> str:
    """The newest wheel variant a driver that reports 'CUDA Version: X.Y' can run."""
    have = vtuple(driver_cuda)
    for variant in WHEEL_CUDA:
        if vtuple(variant) <= have:
            return "cu" + variant.replace(".", "")
    return "cu118"


def min_driver(cuda: str) -> tuple[str, str]:
    """(minimum driver with minor-version compatibility, driver the toolkit release shipped with)."""
    table = load_toml("cuda_driver.toml")
    major = cuda.split(".")[0]
    minor_compat = table.get("minor_compat", {}).get(major, "")
    toolkit = table.get("toolkit", {}).get(".".join(cuda.split(".")[:2]), "")
    return minor_compat, toolkit


def gpu_driver(s: Snapshot) -> CheckResult:
    if s.gpu is None:
        if s.gpu_error in ("nvidia-smi not found", ""):
            note = " (torch is a CUDA build; it runs on CPU too)" if s.torch.cuda else ""
            return CheckResult("gpu.driver", Status.OK,
                               "no NVIDIA GPU: runs use the CPU and the Gloo backend" + note,
                               detail="nvidia-smi not found")
        return CheckResult(
            "gpu.driver", Status.FAIL, "the NVIDIA driver does not answer",
            detail=s.gpu_error,
            hint="check 'nvidia-smi'; after a driver update reboot or reload the module "
                 "(sudo modprobe nvidia); otherwise reinstall the driver: "
                 + install_cmd(s.os, "nvidia-driver", "nvidia-driver-550"))
    gpus = s.gpu.gpus
    if not gpus:
        return CheckResult("gpu.driver", Status.WARN, f"driver {s.gpu.driver_version} lists no GPU",
                           hint="check 'nvidia-smi -L' and the PCIe/virtualisation setup")
    names = sorted({g.name for g in gpus})
    mem = gpus[0].memory_total_mib
    size = f" ({mem / 1024:.0f} GiB)" if mem else ""
    summary = f"{len(gpus)} x {names[0]}{size}, driver {s.gpu.driver_version}, CUDA {s.gpu.cuda_version}"
    if len(names) > 1:
        return CheckResult("gpu.driver", Status.WARN, f"mixed GPU models: {', '.join(names)}",
                           detail="DDP runs at the pace of the slowest GPU",
                           hint="pin a run to one model with CUDA_VISIBLE_DEVICES")
    return CheckResult("gpu.driver", Status.OK, summary, detail=f"via {s.gpu_source}")


def gpu_torch_cuda(s: Snapshot) -> CheckResult:
    if s.gpu is None or not s.gpu.gpus:
        return CheckResult("gpu.torch_cuda", Status.SKIP, "no GPU")
    if not s.torch.installed:
        return CheckResult("gpu.torch_cuda", Status.SKIP, "torch is not installed")
    wheel = wheel_for_driver_cuda(s.gpu.cuda_version)
    pip = f"pip install torch --index-url https://download.pytorch.org/whl/{wheel}"
    if not s.torch.cuda:
        if s.torch.hip:
            return CheckResult("gpu.torch_cuda", Status.FAIL,
                               "torch is a ROCm build but this machine has NVIDIA GPUs", hint=pip)
        return CheckResult(
            "gpu.torch_cuda", Status.FAIL,
            f"torch {s.torch.version} is a CPU build, but this machine has {len(s.gpu.gpus)} NVIDIA GPU(s)",
            detail=f"the driver supports CUDA {s.gpu.cuda_version}", hint=pip)
    need, toolkit = min_driver(s.torch.cuda)
    have = vtuple(s.gpu.driver_version)
    if need and have < vtuple(need):
        return CheckResult(
            "gpu.torch_cuda", Status.FAIL,
            f"driver {s.gpu.driver_version} is too old for torch built with CUDA {s.torch.cuda}",
            detail=f"CUDA {s.torch.cuda.split('.')[0]}.x needs driver >= {need}",
            hint=f"upgrade the NVIDIA driver to >= {toolkit or need}, or install a torch built "
                 f"for the CUDA this driver supports: {pip}")
    note = ""
    if toolkit and have < vtuple(toolkit):
        note = f"older than CUDA {s.torch.cuda}'s own driver {toolkit}: runs through minor-version compatibility"
    return CheckResult("gpu.torch_cuda", Status.OK,
                       f"driver {s.gpu.driver_version} runs torch's CUDA {s.torch.cuda}", detail=note)


_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


def gpu_visible(s: Snapshot) -> CheckResult:
    cvd = s.env.get("CUDA_VISIBLE_DEVICES")
    gpus = s.gpu.gpus if s.gpu else ()
    if not gpus:
        return CheckResult("gpu.visible", Status.SKIP, "no GPU")
    if cvd is None:
        return CheckResult("gpu.visible", Status.OK, f"all {len(gpus)} GPU(s) visible",
                           detail="CUDA_VISIBLE_DEVICES is not set")
    entries = [e.strip() for e in cvd.split(",")] if cvd.strip() else []
    if not entries:
        return CheckResult("gpu.visible", Status.WARN, "CUDA_VISIBLE_DEVICES is empty: torch sees no GPU",
                           hint="unset CUDA_VISIBLE_DEVICES, or list the GPUs to use (e.g. 0,1)")
    if any(e.startswith("MIG-") for e in entries):
        return CheckResult("gpu.visible", Status.OK,
                           f"CUDA_VISIBLE_DEVICES={cvd} names MIG instances",
                           detail="MIG devices are not listed by the GPU facts; not checked further")
    seen: list[int] = []
    for pos, entry in enumerate(entries):
        if entry.isdigit():
            idx = int(entry)
        elif _UUID.match(entry):
            matches = [g.index for g in gpus if g.uuid.lower().startswith(entry.lower())]
            idx = matches[0] if matches else -1
        else:
            idx = -1
        if idx < 0 or idx >= len(gpus):
            kept = ",".join(entries[:pos]) or "none"
            return CheckResult(
                "gpu.visible", Status.FAIL,
                f"CUDA_VISIBLE_DEVICES={cvd} names '{entry}', which is not a GPU here",
                detail=f"this machine has GPUs 0-{len(gpus) - 1}; CUDA stops at the first invalid "
                       f"entry, so torch sees only: {kept}",
                hint=f"export CUDA_VISIBLE_DEVICES={','.join(str(g.index) for g in gpus)}")
        if idx in seen:
            return CheckResult("gpu.visible", Status.FAIL,
                               f"CUDA_VISIBLE_DEVICES={cvd} lists GPU {idx} twice",
                               hint="list each GPU once; NCCL rejects two ranks on one GPU")
        seen.append(idx)
    return CheckResult("gpu.visible", Status.OK,
                       f"CUDA_VISIBLE_DEVICES={cvd}: {len(seen)} of {len(gpus)} GPU(s) visible",
                       detail="use --nproc-per-node equal to this count")
