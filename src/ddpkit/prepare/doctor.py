"""`ddpkit doctor` as a library: collect a snapshot, judge it, report it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ddpkit import __version__
from ddpkit.i18n import set_language
from ddpkit.parsers.firewall import judge_port
from ddpkit.prepare.checks import CheckResult, Snapshot, Status, evaluate, worst
from ddpkit.prepare.checks.base import STATUS_ORDER


@dataclass(frozen=True)
class DoctorReport:
    snapshot: Snapshot
    results: tuple[CheckResult, ...]

    @property
    def status(self) -> Status:
        return worst(list(self.results))

    def facts(self) -> dict:
        s = self.snapshot
        gpus = s.gpu.gpus if s.gpu else ()
        return {
            "ddpkit": __version__,
            "hostname": s.hostname,
            "hostname_addrs": list(s.hostname_addrs),
            "python": s.python_version,
            "executable": s.python_executable,
            "os": s.os.to_dict(),
            "kernel": s.kernel,
            "torch": s.torch.to_dict(),
            "driver": s.gpu.driver_version if s.gpu else "",
            "cuda_driver": s.gpu.cuda_version if s.gpu else "",
            "gpu_count": len(gpus),
            "gpu_model": gpus[0].name if gpus else "",
            "gpus": [g.to_dict() for g in gpus],
            "interfaces": [i.to_dict() for i in s.interfaces],
            "master_port": s.master_port,
            "cpu_count": s.cpu_count,
            "shm_bytes": s.shm_bytes,
            "companions": dict(s.companions),
            "firewall": judge_port(s.firewall, s.master_port).firewall,
        }

    def to_dict(self) -> dict:
        return {"schema": 1, "host": self.snapshot.hostname,
                "status": self.status.value,
                "checks": [r.to_dict() for r in self.results], "facts": self.facts()}

    def ordered(self) -> list[CheckResult]:
        """Problems first, then by area in table order (stable sort keeps the table order)."""
        return sorted(self.results, key=lambda r: STATUS_ORDER[r.status])


def run_doctor(environ: Mapping[str, str] | None = None, port: int | None = None,
               lang: str | None = None) -> DoctorReport:
    """lang: the language of the texts ('en', 'zh_CN'); `check` passes its own to the nodes."""
    from ddpkit.prepare.checks.collect import collect

    if lang:
        set_language(lang)

    snapshot = collect(environ, master_port=port)
    return DoctorReport(snapshot, tuple(evaluate(snapshot)))
