"""GPUs, driver, and whether the driver can run this torch's CUDA build."""

from __future__ import annotations

import re

from ddpkit.data import load_toml
from ddpkit.i18n import _
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


def cuda_wheel_command(driver_cuda: str = "", python: str = "") -> str:
    """The pip command that installs a CUDA build of torch: for the driver's CUDA when known,
    else the newest variant, with where to learn the right one."""
    wheel = wheel_for_driver_cuda(driver_cuda) if driver_cuda else "cu" + WHEEL_CUDA[0].replace(".", "")
    pip = f"{python} -m pip" if python else "pip"
    cmd = f"{pip} install torch --index-url https://download.pytorch.org/whl/{wheel}"
    if not driver_cuda:
        cmd += " " + _("(or the cuXXX variant the node's driver supports: 'ddpkit doctor' there "
                       "names it)")
    return cmd


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
            note = _(' (torch is a CUDA build; it runs on CPU too)') if s.torch.cuda else ""
            return CheckResult("gpu.driver", Status.OK,
                               _('no NVIDIA GPU: runs use the CPU and the Gloo backend{note}').format(note=note),
                               detail=_('nvidia-smi not found'))
        return CheckResult(
            "gpu.driver", Status.FAIL, _('the NVIDIA driver does not answer'),
            detail=s.gpu_error,
            hint=_("check 'nvidia-smi'; after a driver update reboot or reload the module (sudo modprobe nvidia); otherwise reinstall the driver: {install_cmd}").format(install_cmd=install_cmd(s.os, "nvidia-driver", "nvidia-driver-550")))
    gpus = s.gpu.gpus
    if not gpus:
        return CheckResult("gpu.driver", Status.WARN, _('driver {driver_version} lists no GPU').format(driver_version=s.gpu.driver_version),
                           hint=_("check 'nvidia-smi -L' and the PCIe/virtualisation setup"))
    names = sorted({g.name for g in gpus})
    mem = gpus[0].memory_total_mib
    size = f" ({mem / 1024:.0f} GiB)" if mem else ""
    summary = _('{n_gpus} x {names}{size}, driver {driver_version}, CUDA {cuda_version}').format(n_gpus=len(gpus), names=names[0], size=size, driver_version=s.gpu.driver_version, cuda_version=s.gpu.cuda_version)
    if len(names) > 1:
        return CheckResult("gpu.driver", Status.WARN, _('mixed GPU models: {names}').format(names=', '.join(names)),
                           detail=_('DDP runs at the pace of the slowest GPU'),
                           hint=_('pin a run to one model with CUDA_VISIBLE_DEVICES'))
    return CheckResult("gpu.driver", Status.OK, summary, detail=f"via {s.gpu_source}")


def gpu_torch_cuda(s: Snapshot) -> CheckResult:
    if s.gpu is None or not s.gpu.gpus:
        return CheckResult("gpu.torch_cuda", Status.SKIP, _('no GPU'))
    if not s.torch.installed:
        return CheckResult("gpu.torch_cuda", Status.SKIP, _('torch is not installed'))
    pip = cuda_wheel_command(s.gpu.cuda_version)
    if not s.torch.cuda:
        if s.torch.hip:
            return CheckResult("gpu.torch_cuda", Status.FAIL,
                               _('torch is a ROCm build but this machine has NVIDIA GPUs'), hint=pip)
        return CheckResult(
            "gpu.torch_cuda", Status.FAIL,
            _('torch {version} is a CPU build, but this machine has {n_gpus} NVIDIA GPU(s)').format(version=s.torch.version, n_gpus=len(s.gpu.gpus)),
            detail=_('the driver supports CUDA {cuda_version}').format(cuda_version=s.gpu.cuda_version), hint=pip)
    need, toolkit = min_driver(s.torch.cuda)
    have = vtuple(s.gpu.driver_version)
    if need and have < vtuple(need):
        return CheckResult(
            "gpu.torch_cuda", Status.FAIL,
            _('driver {driver_version} is too old for torch built with CUDA {cuda}').format(driver_version=s.gpu.driver_version, cuda=s.torch.cuda),
            detail=_('CUDA {split}.x needs driver >= {need}').format(split=s.torch.cuda.split('.')[0], need=need),
            hint=_('upgrade the NVIDIA driver to >= {value}, or install a torch built for the CUDA this driver supports: {pip}').format(value=toolkit or need, pip=pip))
    note = ""
    if toolkit and have < vtuple(toolkit):
        note = _("older than CUDA {cuda}'s own driver {toolkit}: runs through minor-version compatibility").format(cuda=s.torch.cuda, toolkit=toolkit)
    return CheckResult("gpu.torch_cuda", Status.OK,
                       _("driver {driver_version} runs torch's CUDA {cuda}").format(driver_version=s.gpu.driver_version, cuda=s.torch.cuda), detail=note)


_UUID = re.compile(r"^(GPU|MIG)-[0-9a-fA-F-]+$")


def gpu_visible(s: Snapshot) -> CheckResult:
    cvd = s.env.get("CUDA_VISIBLE_DEVICES")
    gpus = s.gpu.gpus if s.gpu else ()
    if not gpus:
        return CheckResult("gpu.visible", Status.SKIP, _('no GPU'))
    if cvd is None:
        return CheckResult("gpu.visible", Status.OK, _('all {n_gpus} GPU(s) visible').format(n_gpus=len(gpus)),
                           detail=_('CUDA_VISIBLE_DEVICES is not set'))
    entries = [e.strip() for e in cvd.split(",")] if cvd.strip() else []
    if not entries:
        return CheckResult("gpu.visible", Status.WARN, _('CUDA_VISIBLE_DEVICES is empty: torch sees no GPU'),
                           hint=_('unset CUDA_VISIBLE_DEVICES, or list the GPUs to use (e.g. 0,1)'))
    if any(e.startswith("MIG-") for e in entries):
        return CheckResult("gpu.visible", Status.OK,
                           _('CUDA_VISIBLE_DEVICES={cvd} names MIG instances').format(cvd=cvd),
                           detail=_('MIG devices are not listed by the GPU facts; not checked further'))
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
                _("CUDA_VISIBLE_DEVICES={cvd} names '{entry}', which is not a GPU here").format(cvd=cvd, entry=entry),
                detail=_('this machine has GPUs 0-{n_gpus}; CUDA stops at the first invalid entry, so torch sees only: {kept}').format(n_gpus=len(gpus) - 1, kept=kept),
                hint=_('export CUDA_VISIBLE_DEVICES={items}').format(items=','.join(str(g.index) for g in gpus)))
        if idx in seen:
            return CheckResult("gpu.visible", Status.FAIL,
                               _('CUDA_VISIBLE_DEVICES={cvd} lists GPU {idx} twice').format(cvd=cvd, idx=idx),
                               hint=_('list each GPU once; NCCL rejects two ranks on one GPU'))
        seen.append(idx)
    return CheckResult("gpu.visible", Status.OK,
                       _('CUDA_VISIBLE_DEVICES={cvd}: {n_seen} of {n_gpus} GPU(s) visible').format(cvd=cvd, n_seen=len(seen), n_gpus=len(gpus)),
                       detail=_('use --nproc-per-node equal to this count'))
