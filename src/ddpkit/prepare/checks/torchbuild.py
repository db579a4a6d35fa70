"""The installed torch: version, the CUDA it was built for, and its distributed backends."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status
from ddpkit.prepare.checks.util import vtuple


def torch_installed(s: Snapshot) -> CheckResult:
    t = s.torch
    if not t.installed:
        return CheckResult("torch.installed", Status.FAIL, _('torch is not installed for this Python'),
                           detail=s.python_executable,
                           hint=_('{python_executable} -m pip install torch').format(python_executable=s.python_executable))
    build = f"CUDA {t.cuda}" if t.cuda else (f"ROCm {t.hip}" if t.hip else _("CPU build"))
    extra = ", ".join(x for x in (f"cuDNN {t.cudnn}" if t.cudnn else "",
                                  f"NCCL {t.nccl}" if t.nccl else "") if x)
    summary = f"torch {t.version} ({build}{', ' + extra if extra else ''})"
    if vtuple(t.version) < (2,):
        return CheckResult("torch.installed", Status.WARN, summary,
                           hint=_("torch 1.x lacks torchrun's c10d fixes: pip install -U 'torch>=2'"))
    return CheckResult("torch.installed", Status.OK, summary, detail=t.location)


def torch_backends(s: Snapshot) -> CheckResult:
    t = s.torch
    if not t.installed:
        return CheckResult("torch.backends", Status.SKIP, _('torch is not installed'))
    have = [name for name, ok in sorted(t.backends.items()) if ok]
    if not have:
        return CheckResult("torch.backends", Status.FAIL, _('no distributed backend in this torch build'),
                           hint=_('install an official torch wheel: pip install torch'))
    detail = _("NCCL for GPUs, Gloo for CPUs") if t.backends.get("nccl") else \
        _("CPU build: Gloo only (fine without GPUs)")
    if t.backends.get("nccl") and t.cuda and not t.nccl:
        detail += _("; NCCL version unknown (statically linked or system library)")
    return CheckResult("torch.backends", Status.OK, _("backends: {names}").format(names=", ".join(have)),
                       detail=detail)
