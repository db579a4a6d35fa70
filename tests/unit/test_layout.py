"""The package's layout rules (README, "Layout"): stages depend one way, processes and SSH live
in a few modules, planners are pure, the runtime never pulls in the CLI or the launcher."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "ddpkit"

# stage -> the ddpkit units it may import (besides itself). The flow is
# launch <- prepare <- verify, launch <- troubleshoot; cli on top of everything.
SHARED = {"__version__", "errors", "render", "parsers", "data", "nodeside", "locale", "i18n"}
ALLOWED = {
    "launch": SHARED,
    "prepare": SHARED | {"launch"},
    "verify": SHARED | {"launch", "prepare"},
    "troubleshoot": SHARED | {"launch"},
    "runtime": SHARED,
    "compat": SHARED | {"runtime"},
    "nodeside": set(),
    "parsers": {"errors", "i18n"},
    "data": set(),
}
# The only modules that may start processes or open SSH sessions (nodeside is sent to nodes).
PROCESS_MODULES = {"launch/remote.py", "launch/supervise.py", "launch/agents.py",
                   "launch/proc.py"}
PURE_PLANNERS = ["launch/plan.py", "launch/envvars.py", "launch/hosts.py", "launch/output.py"]


def _modules():
    for path in sorted(SRC.rglob("*.py")):
        yield path.relative_to(SRC).as_posix(), ast.parse(path.read_text(), str(path))


def _ddpkit_imports(tree: ast.AST) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
            if node.module == "ddpkit":
                names = [f"ddpkit.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "ddpkit" and len(parts) > 1:
                out.add(parts[1])
    return out


def _stage(rel: str) -> str:
    return rel.split("/")[0].removesuffix(".py")


@pytest.mark.parametrize("rel,tree", list(_modules()), ids=lambda v: v if isinstance(v, str) else "")
def test_stage_imports_flow_one_way(rel, tree):
    stage = _stage(rel)
    if stage not in ALLOWED:
        return  # cli/, __init__, __main__, errors, render, horovod: top of the flow or leaves
    bad = {u for u in _ddpkit_imports(tree) if u != stage and u not in ALLOWED[stage]}
    if rel == "compat/__init__.py" or stage == "compat":
        bad -= {"horovod"}
    assert not bad, f"{rel} imports {sorted(bad)} against the flow (see README, Layout)"


def test_processes_and_ssh_only_in_their_modules():
    offenders = []
    for rel, tree in _modules():
        if rel in PROCESS_MODULES or rel.startswith("nodeside/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names):
                offenders.append(rel)
            if isinstance(node, ast.ImportFrom) and node.module == "subprocess":
                offenders.append(rel)
            if isinstance(node, ast.Attribute) and node.attr in ("system", "popen", "execvp"):
                if isinstance(node.value, ast.Name) and node.value.id == "os":
                    offenders.append(rel)
    assert not offenders, f"processes started outside {sorted(PROCESS_MODULES)}: {offenders}"


@pytest.mark.parametrize("rel", PURE_PLANNERS)
def test_planners_are_pure(rel):
    imports = set()
    for node in ast.walk(ast.parse((SRC / rel).read_text())):
        if isinstance(node, ast.Import):
            imports |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.add(node.module)
    assert not imports & {"subprocess", "socket", "ddpkit.launch.remote",
                          "ddpkit.launch.supervise"}, rel


def test_runtime_never_imports_cli_or_launcher():
    for rel, tree in _modules():
        if _stage(rel) in ("runtime", "compat") or rel == "horovod.py":
            assert not _ddpkit_imports(tree) & {"cli", "launch", "verify", "prepare"}, rel


def test_no_loose_modules_at_the_top():
    """New modules go into their stage's folder (README, Layout)."""
    top = {p.name for p in SRC.glob("*.py")}
    assert top <= {"__init__.py", "__main__.py", "errors.py", "render.py", "horovod.py",
                   "i18n.py"}, sorted(top)
