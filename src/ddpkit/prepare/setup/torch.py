"""`ddpkit setup torch`: one torch version and build on every node, the newest CUDA build each
node's driver runs (the CPU build where there is no GPU), installed with the node's own pip.

Each node is read over SSH (the launcher's probe for its interpreter and torch, nvidia-smi for
the driver); the plan per node is pure: keep, install (upgrade or another build), or refuse a
downgrade. `--wheel-dir` installs from wheels pushed from here (no internet on the nodes).
Nodes that share one venv (NFS) are installed once: the first node first, then only those
that still need it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from typing import Callable

from ddpkit.data import load_toml
from ddpkit.errors import UsageError
from ddpkit.i18n import N_, _
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions, describe_ssh_failure, ssh_push, ssh_run, ssh_run_all
from ddpkit.nodeside import source
from ddpkit.prepare.checks.util import vtuple

INDEX = "https://download.pytorch.org/whl"

# An install step's reason (an id) as a table cell and as the line logged when it runs: one
# whole message each, translated where shown.
CHANGES = {"install": N_("install"), "upgrade": N_("upgrade"), "downgrade": N_("downgrade"),
           "another build": N_("another build")}
_INSTALLING = {
    "install": N_("ddpkit setup torch: {name}: install torch {want}"),
    "upgrade": N_("ddpkit setup torch: {name}: upgrade torch {want}"),
    "downgrade": N_("ddpkit setup torch: {name}: downgrade torch {want}"),
    "another build": N_("ddpkit setup torch: {name}: another build torch {want}"),
}

FACTS_SCRIPT = r"""PY="$1"
echo "@@ddpkit probe"; "$PY" -c "$2" "" "" file pip 2>&1
echo "@@ddpkit smi"; nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1
true
"""


@dataclass(frozen=True)
class TorchNode:
    host: str
    python: str = ""  # "3.11.7"
    torch: str = ""  # "2.13.0+cpu", "" when not installed
    driver: str = ""  # "550.54.14", "" without an NVIDIA GPU
    pip: bool = True
    error: str = ""
    fix: str = ""


@dataclass(frozen=True)
class NodeStep:
    host: str
    action: str  # keep | install | refuse | error
    have: str
    want: str
    command: str = ""
    reason: str = ""
    fix: str = ""

    def to_dict(self) -> dict:
        return {"host": self.host, "action": self.action, "have": self.have, "want": self.want,
                "command": self.command, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class TorchPlan:
    version: str
    steps: tuple[NodeStep, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(s.action in ("refuse", "error") for s in self.steps)

    def to_dict(self) -> dict:
        return {"schema": 1, "version": self.version, "ok": self.ok, "notes": list(self.notes),
                "nodes": [s.to_dict() for s in self.steps]}


# ---- pure -----------------------------------------------------------------------------------

def wheel_variants(version: str) -> tuple[list[str], bool]:
    """CUDA builds ("12.8", ...) of that torch release, newest first; True when assumed."""
    table = load_toml("torch_wheels.toml")["variants"]
    key = ".".join(version.split(".")[:2])
    if key in table:
        return list(table[key]), False
    newest = max(table, key=vtuple)
    return list(table[newest]), vtuple(key) > vtuple(newest)


def newest_cuda_for(driver: str) -> str:
    """The newest CUDA release whose own driver this one is at least (NVIDIA's table)."""
    toolkit = load_toml("cuda_driver.toml")["toolkit"]
    ok = [cuda for cuda, need in toolkit.items() if vtuple(driver) >= vtuple(need)]
    return max(ok, key=vtuple) if ok else ""


def build_for(driver: str, version: str) -> str:
    """'cpu' without a GPU, else 'cuXYZ': the newest build of that release the driver runs."""
    if not driver:
        return "cpu"
    top = newest_cuda_for(driver)
    variants, _unused = wheel_variants(version)
    fits = [v for v in variants if top and vtuple(v) <= vtuple(top)]
    return "cu" + max(fits, key=vtuple).replace(".", "") if fits else ""


def choose_version(asked: str | None, here: str, nodes: list[TorchNode]) -> str:
    """--version, else this machine's torch, else the newest on any node (public part)."""
    for candidate in (asked, here, *sorted((n.torch for n in nodes if n.torch),
                                          key=vtuple, reverse=True)):
        if candidate:
            return candidate.split("+")[0]
    raise UsageError(_('no torch here or on any node to take the version from'),
                     _('give the version: ddpkit setup torch -H ... --version 2.13.0'))


_WHEEL = re.compile(r"^torch-(?P<ver>[^-]+)-(?P<py>cp\d+)-[^-]+-(?P<plat>[^-]+)\.whl$")


def parse_wheels(names: list[str]) -> list[tuple[str, str, str]]:
    """torch wheel file names -> [(version with local label, cpXY, name)]."""
    out = []
    for name in names:
        m = _WHEEL.match(name)
        if m:
            out.append((m.group("ver"), m.group("py"), name))
    return out


def plan_torch(nodes: list[TorchNode], version: str, *, python: str,
               wheels: list[str] | None = None, allow_downgrade: bool = False) -> TorchPlan:
    notes = []
    variants, assumed = wheel_variants(version)
    if assumed:
        notes.append(_("torch {version} is newer than ddpkit's table of builds: assuming the "
                       "builds of the newest release it knows ({builds})").format(
                           version=version, builds=", ".join(f"cu{v}" for v in variants)))
    builds = {n.host: build_for(n.driver, version) for n in nodes if not n.error}
    gpu_builds = sorted({b for b in builds.values() if b.startswith("cu")},
                        key=lambda b: int(b[2:]))
    if len(gpu_builds) > 1:  # the same build everywhere: the one the oldest driver runs
        notes.append(_("drivers differ: every GPU node gets {build}, the build the oldest "
                       "driver runs").format(build=gpu_builds[0]))
        builds = {h: (gpu_builds[0] if b.startswith("cu") else b) for h, b in builds.items()}
    if gpu_builds and "cpu" in builds.values():
        notes.append(_("some nodes have no GPU and get the CPU build: they can only join "
                       "Gloo runs"))
    steps = [_step(n, version, builds.get(n.host, ""), python, wheels, allow_downgrade)
             for n in nodes]
    return TorchPlan(version, tuple(steps), tuple(notes))


def _step(node: TorchNode, version: str, build: str, python: str, wheels: list[str] | None,
          allow_downgrade: bool) -> NodeStep:
    have = node.torch
    if node.error:
        return NodeStep(node.host, "error", have, "", reason=node.error, fix=node.fix)
    if not build:
        return NodeStep(node.host, "error", have, "",
                        reason=_("driver {driver} is too old for every CUDA build of torch "
                                 "{version}").format(driver=node.driver, version=version),
                        fix=_("upgrade the NVIDIA driver, or choose an older --version"))
    want = f"{version}+{build}"
    if have == want:
        return NodeStep(node.host, "keep", have, want, reason=_("already installed"))
    if have and vtuple(have) > vtuple(version) and not allow_downgrade:
        return NodeStep(node.host, "refuse", have, want,
                        reason=_("{host} has torch {have}, newer than {version}: refusing to "
                                 "downgrade").format(host=node.host, have=have, version=version),
                        fix=_("{option} to match it, or --allow-downgrade").format(
                            option=f"--version {have.split('+')[0]}"))
    if not node.pip:
        return NodeStep(node.host, "error", have, want,
                        reason=_("no pip for {python}").format(python=python),
                        fix=_("{command}, or install python3-pip").format(
                            command=f"{python} -m ensurepip"))
    if wheels is not None:
        tag = "cp" + "".join(node.python.split(".")[:2])
        match = [n for v, py, n in parse_wheels(wheels) if v == want and py == tag]
        if not match:
            return NodeStep(node.host, "error", have, want,
                            reason=_("no wheel of torch {want} for Python {python} ({tag}) in "
                                     "--wheel-dir").format(want=want, python=node.python, tag=tag),
                            fix=_("{command} (on a machine with internet)").format(
                                command=f"pip download torch=={want} --index-url {INDEX}/{build} "
                                        f"--python-version {node.python.rsplit('.', 1)[0]} "
                                        "--only-binary=:all: -d DIR"))
        cmd = [python, "-m", "pip", "install", "--no-index", "--find-links", "WHEEL_DIR",
               f"torch=={want}"]
    else:
        cmd = [python, "-m", "pip", "install", f"torch=={want}", "--index-url",
               f"{INDEX}/{build}"]
    # an id (JSON's "reason" of an install step); CHANGES words it for a terminal
    what = "install" if not have else ("another build" if vtuple(have) == vtuple(version)
                                       else ("upgrade" if vtuple(have) < vtuple(version)
                                             else "downgrade"))
    return NodeStep(node.host, "install", have, want, shlex.join(cmd), reason=what)


def node_from_output(host: str, python: str, stdout: str) -> TorchNode:
    sec: dict[str, list[str]] = {}
    key = ""
    for line in stdout.splitlines():
        if line.startswith("@@ddpkit "):
            key = line.split(" ", 1)[1]
            sec[key] = []
        elif key:
            sec[key].append(line)
    probe = next((ln for ln in sec.get("probe", []) if ln.startswith("{")), "")
    if not probe:
        said = " ".join(sec.get("probe", [])).strip()
        return TorchNode(host, error=_("interpreter {python} does not run: {said}").format(
                             python=python, said=said[-200:]),
                         fix=_("give --python PATH (an interpreter on {host}), or create the "
                               "same environment at that path on every node").format(host=host))
    info = json.loads(probe)
    pip_ok = "pip" not in info.get("missing", [])  # the probe looked for the module
    driver = next((ln.strip() for ln in sec.get("smi", []) if re.match(r"^\d+\.\d+", ln.strip())),
                  "")
    return TorchNode(host, info.get("python", ""), info.get("torch", "") or "", driver, pip_ok)


# ---- acting ---------------------------------------------------------------------------------

def read_nodes(hosts: list[Host], ssh: SshOptions, python: str) -> list[TorchNode]:
    argv = ["sh", "-c", FACTS_SCRIPT, "ddpkit", python, source("probe")]
    replies = ssh_run_all(hosts, ssh, [argv] * len(hosts), ssh.connect_timeout + 60)
    out = []
    for host, reply in zip(hosts, replies):
        if reply.returncode != 0:
            fail = describe_ssh_failure(reply.stderr, host)
            out.append(TorchNode(host.name, error=fail.message, fix=fail.fix))
        else:
            out.append(node_from_output(host.name, python, reply.stdout))
    return out


def install(hosts: list[Host], ssh: SshOptions, plan: TorchPlan, *, wheel_dir: str | None,
            reread: Callable[[list[Host]], list[TorchNode]],
            log: Callable[[str], None]) -> dict[str, str]:
    """Install where the plan says so; host -> "" or why it failed. The first node goes
    first: nodes that share its venv then need nothing more."""
    by_name = {h.name: h for h in hosts}
    todo = [s for s in plan.steps if s.action == "install"]
    results: dict[str, str] = {}
    if not todo:
        return results
    first, rest = todo[0], todo[1:]
    results[first.host] = _install_one(by_name[first.host], ssh, first, wheel_dir, log)
    if rest:
        again = {n.host: n for n in reread([by_name[s.host] for s in rest])}
        still = [s for s in rest if again[s.host].torch != s.want]
        for s in rest:
            if s not in still:
                log(_('ddpkit setup torch: {host}: torch {want} is there now (same environment as another node)').format(host=s.host, want=s.want))
                results[s.host] = ""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, min(8, len(still)))) as pool:
            done = pool.map(lambda s: _install_one(by_name[s.host], ssh, s, wheel_dir, log),
                            still)
            results.update({s.host: why for s, why in zip(still, done)})
    return results


def _install_one(host: Host, ssh: SshOptions, step: NodeStep, wheel_dir: str | None,
                 log: Callable[[str], None]) -> str:
    argv = shlex.split(step.command)
    remote_dir = ""
    if wheel_dir is not None:
        remote_dir = f"/tmp/ddpkit-wheels-{os.getpid()}-{host.name}"
        names = sorted(os.listdir(wheel_dir))
        torch_name = step.want
        files = [os.path.join(wheel_dir, n) for n in names if n.endswith(".whl") and (
            not n.startswith("torch-") or n.startswith(f"torch-{torch_name}-"))]
        log(_('ddpkit setup torch: {name}: pushing {n_files} wheel(s) from {wheel_dir}').format(name=host.name, n_files=len(files), wheel_dir=wheel_dir))
        pushed = ssh_push(host, ssh, files, remote_dir, 600)
        if pushed.returncode != 0:
            said = pushed.stderr.strip()[-200:]
            return (_("copying the wheels failed: {said}").format(said=said) if said
                    else _("copying the wheels failed (no message)"))
        argv = [remote_dir if a == "WHEEL_DIR" else a for a in argv]
    log(_(_INSTALLING.get(step.reason, _INSTALLING["install"])).format(name=host.name,
                                                                        want=step.want))
    script = f"{shlex.join(argv)}; rc=$?; " + (f"rm -rf {shlex.quote(remote_dir)}; "
                                              if remote_dir else "") + "exit $rc"
    done = ssh_run(host, ssh, ["sh", "-c", script], 1800)
    if done.returncode == 0:
        return ""
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else _("pip exited {code}").format(code=done.returncode)
