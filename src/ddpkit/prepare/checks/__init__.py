"""The doctor's checks: one small pure function each, registered in this table."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.prepare.checks import envvars, gpu, network, platform, ssh, system, torchbuild
from ddpkit.prepare.checks.base import STATUS_ORDER, CheckFn, CheckResult, Snapshot, Status

# Order within an area is the order shown; problems are sorted first when rendering.
CHECKS: tuple[tuple[str, CheckFn], ...] = (
    ("python", platform.python_version),
    ("python", platform.python_env),
    ("os", platform.os_distro),
    ("torch", torchbuild.torch_installed),
    ("torch", torchbuild.torch_backends),
    ("gpu", gpu.gpu_driver),
    ("gpu", gpu.gpu_torch_cuda),
    ("gpu", gpu.gpu_visible),
    ("net", network.net_interfaces),
    ("net", network.net_hostname),
    ("net", network.net_master_addr),
    ("port", network.port_free),
    ("port", network.port_firewall),
    ("env", envvars.env_vars),
    ("sys", system.sys_shm),
    ("sys", system.sys_nofile),
    ("sys", system.sys_memlock),
    ("sys", system.sys_threads),
    ("ssh", ssh.ssh_client),
    ("ssh", ssh.ssh_keys),
    ("ssh", ssh.ssh_perms),
    ("companions", ssh.companions),
)


def evaluate(snapshot: Snapshot) -> list[CheckResult]:
    """Run every check; a check that crashes becomes a 'skip' naming the bug, not a traceback."""
    results: list[CheckResult] = []
    for area, fn in CHECKS:
        try:
            got = fn(snapshot)
        except Exception as exc:  # a bug in one check must not hide the others
            got = CheckResult(f"{area}.{fn.__name__}", Status.SKIP,
                              _('check failed: {name}: {exc}').format(name=type(exc).__name__, exc=exc))
        results.extend(got if isinstance(got, list) else [got])
    return results


def worst(results: list[CheckResult]) -> Status:
    return min((r.status for r in results), key=STATUS_ORDER.__getitem__, default=Status.OK)


__all__ = ["CHECKS", "CheckResult", "Snapshot", "Status", "evaluate", "worst"]
