"""The launch's run record and hang watch: created before the run, finished after it, and the
part of the summary that says where every rank was when the run stalled."""

from __future__ import annotations

import os
import sys
from dataclasses import asdict

from ddpkit.cli.common import err
from ddpkit.errors import EnvironmentFailure
from ddpkit.i18n import _

STATE = {"SIGINT": "interrupted", "SIGTERM": "interrupted", "SIGHUP": "interrupted",
         "hang": "hung"}


def start_record(plan, args, probes=()):
    """(record, watch): the record of this run (its directory holds the logs), and the
    supervisor's on_stall (None for --engine horovod: horovodrun starts the nodes itself)."""
    from ddpkit.cli.common import ssh_options
    from ddpkit.launch.envvars import mask_args
    from ddpkit.launch.runs import RunRecord
    from ddpkit.troubleshoot.hang import HangWatch

    ssh = ssh_options(args)
    hosts = [n.host for n in plan.nodes]
    python = args.python or sys.executable
    facts = [{"host": p.host.name, "facts": _facts(p)} for p in probes]
    try:
        record = RunRecord.create(run_id=plan.run_id, hosts=[h.to_dict() for h in hosts],
                                  ssh=asdict(ssh), python=python,
                                  argv=mask_args(list(getattr(args, "argv", []) or [])),
                                  plan=plan.to_dict(), facts=facts, log_dir=args.log_dir)
        record.data["world_size"] = plan.world_size
        record.save()
    except EnvironmentFailure as exc:
        if args.log_dir:
            raise
        # a read-only home must not stop a launch: it runs, without a record
        err(_('ddpkit: note: no run record: {message} ({hint})').format(message=exc.message, hint=exc.hint))
        record = None
    watch = None
    if getattr(args, "engine", "torchrun") != "horovod":
        watch = HangWatch(hosts, [n.local for n in plan.nodes], ssh, python, plan.run_id,
                          plan.world_size, record, say=err,
                          hang_timeout=getattr(args, "hang_timeout", None) or 0.0)
    return record, watch


def _facts(probe) -> dict:
    info = dict(getattr(probe, "info", {}) or {})
    facts = getattr(probe, "facts", None)
    if facts is not None and hasattr(facts, "__dataclass_fields__"):
        info["node"] = asdict(facts)
    return info


def finish_record(record, result, findings, watch) -> dict:
    """Write summary.json (and diagnosis.json) and the final state; returns the summary."""
    stall = watch.to_dict() if watch is not None else None
    summary = {**result.to_dict(), "diagnosis": [f.to_dict() for f in findings[:3]],
               "stacks": stall, "run_dir": str(record.dir) if record else None}
    if record is None:
        return summary
    if watch is not None:
        watch.save(record)
    if findings:
        record.write_json("diagnosis.json", [f.to_dict() for f in findings])
    state = STATE.get(result.reason) or ("ok" if result.exit_code == 0 else "failed")
    verdict = (stall or {}).get("verdict") or _verdict(result)
    record.finish(state=state, exit_code=result.exit_code, verdict=verdict, summary=summary)
    return summary


def _verdict(result) -> str:
    if result.first_failure:
        first = next((n for n in result.nodes if n["host"] == result.first_failure), {})
        return f"{result.first_failure} failed first: {first.get('first_error', '')}"[:200]
    return "ok" if result.exit_code == 0 else result.reason or f"exit {result.exit_code}"


def show_stall(watch, hang_timeout) -> None:
    """Where every rank was, under the summary table."""
    if watch is None or not watch.why:
        return
    if watch.why == "hang":
        err(_('where every rank was after {hang_timeout:g} s of silence (stacks taken in {took_s:.1f} s):').format(hang_timeout=hang_timeout, took_s=watch.took_s))
    else:
        err(_('interrupted ({why}) on a silent run; where every rank was:').format(why=watch.why))
    if watch.report is None:
        err(_('  stacks could not be taken: {value}').format(value=watch.error or 'no answer'))
        return
    for line in watch.report.lines():
        err(f"  {line}")
    record = getattr(watch.record, "dir", None)
    if record:
        err(_("  (full stacks: {record}; 'ddpkit stacks --last' shows them again)").format(record=os.path.join(str(record), 'stacks.json')))
