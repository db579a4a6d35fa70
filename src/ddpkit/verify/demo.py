"""Judging the demo job: did training converge and do all ranks agree? Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass

RESULT_PREFIX = "DDPKIT_DEMO_RESULT "


@dataclass(frozen=True)
class DemoCheck:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class DemoVerdict:
    passed: bool
    checks: tuple[DemoCheck, ...]

    def to_dict(self) -> dict:
        return {"passed": self.passed,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks]}


def parse_result(line: str) -> dict | None:
    if not line.startswith(RESULT_PREFIX):
        return None
    try:
        return json.loads(line[len(RESULT_PREFIX):])
    except ValueError:
        return None


def judge(results: dict[int, dict], world_size: int, exit_code: int) -> DemoVerdict:
    rs = [results[r] for r in sorted(results)]
    checks = [
        DemoCheck("run", exit_code == 0, "every node exited 0" if exit_code == 0
                  else f"the run failed (exit {exit_code})"),
        DemoCheck("ranks", len(rs) == world_size,
                  f"{len(rs)} of {world_size} ranks reported"),
    ]
    if rs:
        fell = [r for r in rs if r["loss_last"] < 0.01 * r["loss_first"]]
        checks.append(DemoCheck(
            "loss fell", len(fell) == len(rs),
            f"loss {max(r['loss_first'] for r in rs):.3g} -> {max(r['loss_last'] for r in rs):.3g}"))
        checks.append(DemoCheck(
            "true weights", all(r["weight_error"] < 0.05 for r in rs),
            f"max |w - w_true| = {max(r['weight_error'] for r in rs):.2g}"))
        same = all(r["params_identical"] for r in rs)
        checks.append(DemoCheck("identical parameters", same,
                                "all ranks hold the same parameters" if same
                                else "ranks disagree: gradients were not averaged"))
        sums = all(r["allreduce_sum"] == r["allreduce_expected"] for r in rs)
        checks.append(DemoCheck("all_reduce", sums, f"sum {rs[0]['allreduce_sum']:g}, expected "
                                f"{rs[0]['allreduce_expected']:g}"))
    return DemoVerdict(all(c.ok for c in checks), tuple(checks))
