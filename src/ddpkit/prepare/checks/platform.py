"""Python, virtual environment and operating system."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status
from ddpkit.prepare.checks.util import vtuple


def python_version(s: Snapshot) -> CheckResult:
    if vtuple(s.python_version) < (3, 9):
        return CheckResult("python.version", Status.FAIL, _('Python {python_version} is too old').format(python_version=s.python_version),
                           hint=_('use Python 3.9 or newer (3.10+ recommended) in a venv or conda env'))
    return CheckResult("python.version", Status.OK, f"Python {s.python_version}",
                       detail=s.python_executable)


def python_env(s: Snapshot) -> CheckResult:
    if s.conda_env:
        return CheckResult("python.env", Status.OK, _("conda environment '{conda_env}'").format(conda_env=s.conda_env))
    if s.in_venv:
        return CheckResult("python.env", Status.OK, _('virtual environment active'),
                           detail=s.python_executable)
    return CheckResult(
        "python.env", Status.WARN, _('system Python, no venv or conda environment'),
        detail=_('packages installed into the system Python drift apart between nodes'),
        hint=_('python3 -m venv ~/ddp-env && . ~/ddp-env/bin/activate, then install the same packages on every node'))


def os_distro(s: Snapshot) -> CheckResult:
    name = s.os.pretty or s.os.id or "unknown Linux"
    return CheckResult("os.distro", Status.OK, name,
                       detail=_('kernel {kernel}; hints use {pkg} and {firewall}').format(kernel=s.kernel, pkg=s.os.pkg, firewall=s.os.firewall))
