"""Build real Horovod for the installed torch.

Horovod 0.28.1, the last release, does not build against torch >= 2.1 as published: its CMake
forces C++14 and torch's headers need C++17. We download the release's source from PyPI, set
the C++ standard to 17 in the two CMakeLists that pin it, and build it against this
interpreter's torch (no build isolation, so it compiles against exactly that torch).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ddpkit.errors import EnvironmentFailure
from ddpkit.i18n import _
from ddpkit.launch.proc import run_cmd

BUILD_DEPS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi", "numpy", "wheel",
              "setuptools")
CXX17_FILES = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
_STANDARD = re.compile(r"set\(CMAKE_CXX_STANDARD 1[14]\)")


@dataclass(frozen=True)
class Step:
    what: str
    argv: tuple[str, ...]


def patch_cxx17(source: Path) -> list[str]:
    """Raise every pinned C++ standard to 17; returns the files changed (pure file edit)."""
    changed = []
    for rel in CXX17_FILES:
        path = source / rel
        text = path.read_text()
        new = _STANDARD.sub("set(CMAKE_CXX_STANDARD 17)", text)
        if new != text:
            path.write_text(new)
            changed.append(rel)
    return changed


def build_env(mpi: bool, environ: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env.update(HOROVOD_WITH_PYTORCH="1", HOROVOD_WITH_GLOO="1", HOROVOD_WITHOUT_TENSORFLOW="1",
               HOROVOD_WITHOUT_MXNET="1", MAKEFLAGS=f"-j{os.cpu_count() or 2}")
    if mpi:
        env["HOROVOD_WITH_MPI"] = "1"
    else:
        env["HOROVOD_WITHOUT_MPI"] = "1"
    env.setdefault("HOROVOD_CPU_OPERATIONS", "MPI" if mpi else "GLOO")
    return env


def plan(python: str, version: str, workdir: Path) -> list[Step]:
    pip = [python, "-m", "pip"]
    return [
        Step(_("install the build dependencies"), (*pip, "install", "-q", *BUILD_DEPS)),
        Step(_("download horovod {version} (source)").format(version=version),
             (*pip, "download", "-q", "--no-deps", "--no-binary", ":all:",
              f"horovod=={version}", "-d", str(workdir))),
        Step(_("build and install against this torch (C++17)"),
             (*pip, "install", "--no-build-isolation", "--no-deps", "--no-cache-dir",
              str(workdir / f"horovod-{version}"))),
        Step(_("check the build"), (python, "-m", "horovod.runner.launch", "--check-build")),
    ]


def _run(step: Step, env: dict[str, str], log) -> None:
    log(_("ddpkit setup horovod: {what}").format(what=step.what))
    done = run_cmd(list(step.argv), timeout=None, env=env)
    if done.returncode is None:
        raise EnvironmentFailure(_("cannot run {command}: {error}").format(
                                     command=step.argv[0], error=done.error),
                                 _("give --python the path of the interpreter that has torch"))
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
        for line in tail:
            log(f"  {line}")
        raise EnvironmentFailure(_("{what} failed (exit {code}): {last}").format(
                                     what=step.what, code=done.returncode,
                                     last=tail[-1] if tail else ""),
                                 _("see the lines above; the build needs g++, cmake and make "
                                   "({commands})").format(
                                     commands="apt-get install g++ cmake make / dnf install "
                                              "gcc-c++ cmake make"))


def setup_horovod(python: str = sys.executable, version: str = "0.28.1", log=print) -> str:
    """Build and install; returns what `horovodrun --check-build` printed."""
    for tool in ("cmake", "make", "g++"):
        if shutil.which(tool) is None:
            raise EnvironmentFailure(_("'{tool}' is not installed; Horovod compiles C++").format(
                                         tool=tool),
                                     "apt-get install g++ cmake make (Debian/Ubuntu), dnf install "
                                     "gcc-c++ cmake make (Rocky/CentOS)")
    mpi = shutil.which("mpicxx") is not None
    env = build_env(mpi)
    with tempfile.TemporaryDirectory(prefix="ddpkit-horovod-") as tmp:
        work = Path(tmp)
        steps = plan(python, version, work)
        _run(steps[0], env, log)
        _run(steps[1], env, log)
        archive = next(work.glob(f"horovod-{version}.tar.gz"), None)
        if archive is None:
            raise EnvironmentFailure(_("no source archive of horovod {version} was "
                                       "downloaded").format(version=version),
                                     _("check that PyPI is reachable (pip download horovod)"))
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):  # 3.9.17+, 3.10.12+, 3.11.4+, 3.12
                tar.extractall(work, filter="data")
            else:  # pragma: no cover
                tar.extractall(work)
        changed = patch_cxx17(work / f"horovod-{version}")
        controllers = "gloo + mpi" if mpi else "gloo"
        log((_("ddpkit setup horovod: C++17 in {files}; controllers: {controllers}") if changed
             else _("ddpkit setup horovod: C++17 already; controllers: {controllers}")).format(
                 files=", ".join(changed), controllers=controllers))
        _run(steps[2], env, log)
    check = run_cmd(list(steps[3].argv), timeout=120, env=env)
    if check.returncode != 0:
        raise EnvironmentFailure(_("horovod was installed but --check-build failed: {last}").format(
                                     last=(check.stderr.strip().splitlines()
                                           or [check.error or "?"])[-1]),
                                 _("{command} shows the error").format(
                                     command=f"{python} -c 'import horovod.torch'"))
    return check.stdout
