"""ddpkit demo: the built-in DDP sanity job. With no hosts, this machine (2 CPU processes with
Gloo, or one per GPU with NCCL); with -H, across the nodes. Ends with PASS or FAIL."""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys

from ddpkit.cli.common import (
    add_host_arguments,
    add_run_arguments,
    add_ssh_arguments,
    err,
    hosts_from,
    port_from,
    positive,
    ssh_options,
    writable_dir,
)
from ddpkit.cli.habits import nproc_value
from ddpkit.errors import ExitCode
from ddpkit.i18n import _


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    parser.add_argument("--nproc-per-node", "--nproc_per_node", type=nproc_value, metavar="N",
                        help=_('processes per node: a number, gpu, cpu or auto as in torchrun (default: one per GPU, else 2)'))
    add_run_arguments(parser)
    parser.add_argument("--epochs", type=positive(int), default=5, metavar="N",
                        help=_('training epochs'))
    add_ssh_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from ddpkit.cli.bench import cpu_torch_on_gpus
    from ddpkit.cli.launch import report_problems, supervise
    from ddpkit.launch.launcher import PreflightError, prepare
    from ddpkit.launch.plan import LaunchOptions
    from ddpkit.nodeside import source
    from ddpkit.verify.demo import RESULT_PREFIX, judge, parse_result

    writable_dir(args.log_dir, "--log-dir")
    hosts, _unused = hosts_from(args)
    port, fixed = port_from(args)
    opts = LaunchOptions(
        script="@TMP@/ddpkit_demo.py", nproc_per_node=args.nproc_per_node, port=port,
        fixed_port=fixed,
        python=args.python or sys.executable, workdir="/tmp", run_id=f"ddpkit-demo-{secrets.token_hex(3)}",
        env_pairs=(("DDPKIT_DEMO_EPOCHS", str(args.epochs)),))
    try:
        prepared = prepare(hosts, opts, ssh_options(args), os.environ,
                           slots_for=lambda facts: facts.gpus or 2)
    except PreflightError as exc:
        report_problems(exc, args.json)
        return int(exc.code)
    plan = prepared.plan
    for note in cpu_torch_on_gpus(prepared.probes, opts.python):
        err(_('ddpkit demo: note: {note}').format(note=note))
    gpus = all(p.facts and p.facts.gpus and p.info.get("torch_cuda", "?")
               for p in prepared.probes)
    err(_('ddpkit demo: {n_nodes} node(s), {world_size} process(es), {value}; training y = Xw + b with known w').format(n_nodes=len(plan.nodes), world_size=plan.world_size, value='NCCL on GPUs' if gpus else 'Gloo on CPU'))
    results: dict[int, dict] = {}

    def collect(host: str, rank: int | None, text: str) -> None:
        got = parse_result(text)
        if got is not None:
            results[int(got["rank"])] = got

    run_result = supervise(plan, args, files={"ddpkit_demo.py": source("demo_job")},
                           on_line=collect, hide=re.compile("^" + re.escape(RESULT_PREFIX)))
    verdict = judge(results, plan.world_size, run_result.exit_code)
    if args.json:
        from ddpkit.render import print_json

        print_json({"schema": 1, **verdict.to_dict(), "run": run_result.to_dict(),
                    "ranks": [results[r] for r in sorted(results)]})
    else:
        from ddpkit.cli.launch import show_summary

        if not verdict.passed:
            show_summary(run_result)
        for check in verdict.checks:
            mark = _("ok") if check.ok else _("FAIL")
            err(f"  {mark:<4}  {check.label}: {check.detail}")
        err(_("PASS") if verdict.passed else _("FAIL"))
    return ExitCode.OK if verdict.passed else ExitCode.FAILURE
