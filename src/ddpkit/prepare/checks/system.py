"""Shared memory, file and locked-memory limits, CPU threads."""

from __future__ import annotations

import resource

from ddpkit.i18n import _
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status
from ddpkit.prepare.checks.util import gib

SHM_FAIL = 256 * 2**20  # Docker's default is 64 MiB: NCCL and DataLoader workers fail there
SHM_WARN = 1 * 2**30


def sys_shm(s: Snapshot) -> CheckResult:
    hint = (_('containers: docker run --shm-size=16g (or --ipc=host); Kubernetes: mount an emptyDir with medium: Memory at /dev/shm; a host: sudo mount -o remount,size=16G /dev/shm'))
    if s.shm_bytes is None:
        return CheckResult("sys.shm", Status.FAIL, _('/dev/shm is missing'), hint=hint)
    size = gib(s.shm_bytes)
    if s.shm_bytes < SHM_FAIL:
        return CheckResult("sys.shm", Status.FAIL, _('/dev/shm is only {size}').format(size=size),
                           detail=_("NCCL's shared-memory transport and DataLoader workers need more ('Bus error', 'unhandled system error')"), hint=hint)
    if s.shm_bytes < SHM_WARN:
        return CheckResult("sys.shm", Status.WARN, _('/dev/shm is {size}').format(size=size),
                           detail=_('DataLoader workers with large batches may run out'), hint=hint)
    return CheckResult("sys.shm", Status.OK, _('/dev/shm is {size}').format(size=size))


def sys_nofile(s: Snapshot) -> CheckResult:
    if s.nofile is None:
        return CheckResult("sys.nofile", Status.SKIP, "unknown")
    soft, hard = s.nofile
    if soft != resource.RLIM_INFINITY and soft < 4096:
        return CheckResult(
            "sys.nofile", Status.WARN, _('open-files limit is {soft}').format(soft=soft),
            detail=_("many ranks and DataLoader workers open sockets and files: 'Too many open files'"),
            hint=_("ulimit -n 65536 (persist it in /etc/security/limits.conf: '* - nofile 65536')"))
    return CheckResult("sys.nofile", Status.OK, _('open-files limit is {soft}').format(soft=soft))


def sys_memlock(s: Snapshot) -> CheckResult:
    if s.memlock is None:
        return CheckResult("sys.memlock", Status.SKIP, "unknown")
    soft, _unused = s.memlock
    shown = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    has_gpu = bool(s.gpu and s.gpu.gpus)
    if soft != resource.RLIM_INFINITY and has_gpu:
        return CheckResult(
            "sys.memlock", Status.WARN, _('locked-memory limit is {shown}').format(shown=shown),
            detail=_('InfiniBand/RoCE (NCCL NET/IB) needs to pin memory; a low limit fails registration'),
            hint=_("ulimit -l unlimited (persist: '* - memlock unlimited' in /etc/security/limits.conf; docker run --ulimit memlock=-1)"))
    return CheckResult("sys.memlock", Status.OK, _('locked-memory limit is {shown}').format(shown=shown))


def sys_threads(s: Snapshot) -> CheckResult:
    omp = s.env.get("OMP_NUM_THREADS")
    if omp is None:
        return CheckResult("sys.threads", Status.OK, _('{cpu_count} CPU(s) usable').format(cpu_count=s.cpu_count),
                           detail=_('torchrun sets OMP_NUM_THREADS=1 per worker when it starts several'))
    if not omp.isdigit() or int(omp) < 1:
        return CheckResult("sys.threads", Status.WARN, _('OMP_NUM_THREADS={omp} is not a positive number').format(omp=omp),
                           hint=_('export OMP_NUM_THREADS=<CPUs / processes per node>'))
    if int(omp) > s.cpu_count:
        return CheckResult(
            "sys.threads", Status.WARN, _('OMP_NUM_THREADS={omp} exceeds the {cpu_count} usable CPU(s)').format(omp=omp, cpu_count=s.cpu_count),
            detail=_('every worker runs that many threads: oversubscription slows all ranks'),
            hint=_('export OMP_NUM_THREADS={max} (CPUs / processes per node)').format(max=max(1, s.cpu_count // 2)))
    return CheckResult("sys.threads", Status.OK, _('OMP_NUM_THREADS={omp} of {cpu_count} CPU(s)').format(omp=omp, cpu_count=s.cpu_count))
