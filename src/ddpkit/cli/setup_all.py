"""`ddpkit setup all`: `setup ssh`, `setup firewall` and `setup torch` in that order, each step's
report printed as it finishes, stopping at the first step that fails.

SSH comes first because it is the only step that may ask for passwords (once per host) and the
other two need BatchMode login to look at the nodes; so it runs even without --apply, while the
firewall and torch steps then only print what they would do. The steps are the subcommands'
own functions (cli/setup.py, cli/setup_nodes.py), run on a copy of these arguments.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from ddpkit.cli.common import add_host_arguments, add_ssh_arguments, tcp_port
from ddpkit.errors import DdpkitError, ExitCode
from ddpkit.i18n import N_, _

STEPS = ("ssh", "firewall", "torch")
# What is left to change without --apply (only these two steps wait for it): one whole message
# each, so no translation strings English step names together.
_PENDING = {
    ("firewall",): N_('ddpkit setup all: SSH works on every node; the firewalls would change as shown above: run again with --apply'),
    ("torch",): N_('ddpkit setup all: SSH works on every node; torch would be installed as shown above: run again with --apply'),
    ("firewall", "torch"): N_('ddpkit setup all: SSH works on every node; the firewalls and torch would change as shown above: run again with --apply'),
}


def add_all(p: argparse.ArgumentParser) -> None:
    add_host_arguments(p)
    add_ssh_arguments(p)
    p.add_argument("--port", type=tcp_port, default=29500, metavar="N",
                   help=_('rendezvous port on the first host (default 29500)'))
    p.add_argument("--apply", action="store_true",
                   help=_('change the firewalls and install torch (SSH is set up either way)'))
    p.add_argument("--python", metavar="PATH",
                   help=_('interpreter on every node (default {executable})').format(executable=sys.executable))
    p.add_argument("--version", dest="torch_version", metavar="V",
                   help=_("torch version (default: this machine's torch, else the newest on a node)"))
    p.add_argument("--wheel-dir", metavar="DIR",
                   help=_('install torch from the wheels in DIR, pushed from here'))
    p.add_argument("--all-pairs", action="store_true",
                   help=_('also let every node log in to every other (mpirun, horovodrun)'))


def _changed(name: str, result: dict) -> tuple[bool, bool]:
    """(changed something, would change something without --apply) from a step's result."""
    if name == "ssh":
        return bool(result.get("changed")), False
    if name == "firewall":
        return bool(result.get("applied")), bool(result.get("changes_needed"))
    installs = any(n.get("action") == "install" for n in result.get("nodes", []))
    return bool(result.get("installed")), installs


def run_all(args: argparse.Namespace) -> int:
    from ddpkit.cli.setup import _hosts, _run_ssh
    from ddpkit.cli.setup_nodes import run_firewall, run_torch, torch_wheels
    from ddpkit.render import console

    hosts = _hosts(args)  # usage errors before any step changes anything
    torch_wheels(args)
    out = console()
    runners = {"ssh": (_run_ssh, {}), "firewall": (run_firewall, {"stop_firewall": False}),
               "torch": (run_torch, {"allow_downgrade": False})}
    steps: list[dict] = []
    for i, name in enumerate(STEPS, 1):
        step, extra = runners[name]
        if not args.json:
            out.print(_('[bold]== ddpkit setup all: step {i} of 3: setup {name}[/]').format(i=i, name=name))
        sink: dict = {}
        try:
            code = step(argparse.Namespace(**{**vars(args), **extra}), sink=sink)
        except DdpkitError as exc:  # the step's own error and hint, printed by the caller
            steps.append(_record(name, int(exc.code), sink, exc))
            _finish(args, steps, out, hosts)
            raise
        steps.append(_record(name, int(code), sink))
        if code != ExitCode.OK:
            break
    return _finish(args, steps, out, hosts)


def _record(name: str, code: int, result: dict, exc: DdpkitError | None = None) -> dict:
    changed, pending = _changed(name, result)
    return {"step": name, "exit": code, "changed": changed, "pending": pending,
            "error": exc.message if exc else "", "hint": exc.hint if exc else "",
            "result": result}


def _finish(args: argparse.Namespace, steps: list[dict], out, hosts) -> int:
    from rich.markup import escape

    from ddpkit.render import print_json

    failed = next((s for s in steps if s["exit"] != ExitCode.OK), None)
    changed = [s["step"] for s in steps if s["changed"]]
    pending = [s["step"] for s in steps if s["pending"] and not args.apply]
    if args.json:
        print_json({"schema": 1, "status": "fail" if failed else "ok", "apply": args.apply,
                    "changed": bool(changed), "pending": pending,
                    "failed_step": failed["step"] if failed else "", "steps": steps})
    elif failed:
        # steps are named by their commands (setup firewall), which no translation touches
        left = ", ".join(f"setup {name}" for name in STEPS[len(steps):])
        stopped = (_('[bold red]ddpkit setup all: stopped at setup {step}[/] (steps not run: {left}); fix what it names above, then run ddpkit setup all again')
                   if left else
                   _('[bold red]ddpkit setup all: stopped at setup {step}[/]; fix what it names above, then run ddpkit setup all again'))
        out.print(stopped.format(step=failed['step'], left=left), soft_wrap=True)
    elif pending:
        out.print(_(_PENDING[tuple(pending)]))
    else:
        demo = f"ddpkit demo -H {','.join(h.name for h in hosts)}"
        if args.python:
            demo += f" --python {shlex.quote(args.python)}"
        done = (_('[green]ddpkit setup all: done (changed: {steps})[/]; next: {demo}') if changed
                else _('[green]ddpkit setup all: nothing to change: SSH, firewall and torch were already set up on every node[/]; next: {demo}'))
        out.print(done.format(steps=", ".join(f"setup {name}" for name in changed),
                              demo=escape(demo)), soft_wrap=True)
    return int(failed["exit"]) if failed else int(ExitCode.OK)
