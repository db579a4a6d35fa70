"""Judging the demo job: did training converge and do all ranks agree? Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ddpkit.i18n import N_, _

RESULT_PREFIX = "DDPKIT_DEMO_RESULT "


# what each check is called on a terminal; `name` (the JSON's) stays as it is
_LABELS = {"run": N_("run"), "ranks": N_("ranks"), "loss fell": N_("loss fell"),
           "true weights": N_("true weights"), "identical parameters": N_("identical parameters"),
           "all_reduce": "all_reduce"}


@dataclass(frozen=True)
class DemoCheck:
    name: str
    ok: bool
    detail: str

    @property
    def label(self) -> str:
        return _(_LABELS[self.name]) if self.name in _LABELS else self.name


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
        DemoCheck("run", exit_code == 0, _('every node exited 0') if exit_code == 0
                  else _('the run failed (exit {exit_code})').format(exit_code=exit_code)),
        DemoCheck("ranks", len(rs) == world_size,
                  _('{n_rs} of {world_size} ranks reported').format(n_rs=len(rs), world_size=world_size)),
    ]
    if rs:
        fell = [r for r in rs if r["loss_last"] < 0.01 * r["loss_first"]]
        checks.append(DemoCheck(
            "loss fell", len(fell) == len(rs),
            _("loss {first:.3g} -> {last:.3g}").format(first=max(r['loss_first'] for r in rs),
                                                       last=max(r['loss_last'] for r in rs))))
        checks.append(DemoCheck(
            "true weights", all(r["weight_error"] < 0.05 for r in rs),
            _('max |w - w_true| = {max:.2g}').format(max=max(r['weight_error'] for r in rs))))
        same = all(r["params_identical"] for r in rs)
        checks.append(DemoCheck("identical parameters", same,
                                _('all ranks hold the same parameters') if same
                                else _('ranks disagree: gradients were not averaged')))
        sums = all(r["allreduce_sum"] == r["allreduce_expected"] for r in rs)
        checks.append(DemoCheck("all_reduce", sums, _('sum {allreduce_sum:g}, expected {allreduce_expected:g}').format(allreduce_sum=rs[0]['allreduce_sum'], allreduce_expected=rs[0]['allreduce_expected'])))
    return DemoVerdict(all(c.ok for c in checks), tuple(checks))
