"""How much of Horovod's own PyTorch test suite passes under ddpkit.horovod?

Runs horovod/horovod's `test/parallel/test_torch.py` test by test with 2 ranks, each test under
a wall-clock limit (a test that hangs is killed and counted, and the rest go on):
  shim  `ddpkit launch --horovod --nproc-per-node 2 -m pytest -x SUITE/test_torch.py::Class::test`
  real  `horovodrun --gloo -np 2 python -m pytest -x ...` (needs `ddpkit setup horovod`)
and prints pass/skip/fail counts and one line per test.

The suite is third-party code and is not part of this repository. Prepare it once, outside the
repository, from a checkout of horovod/horovod:
  SUITE=/tmp/hvdsuite; mkdir -p $SUITE
  cp test/parallel/test_torch.py test/utils/common.py $SUITE/
with exactly two edits in $SUITE/common.py: `in_thread` (imported from horovod.runner) becomes a
plain threading.Thread helper, and mpi_env_rank_and_size() also reads RANK/WORLD_SIZE. The suite
imports cloudpickle, mock and numpy: `pip install --target $SUITE/deps cloudpickle mock` (a
`deps` folder in the suite is put on PYTHONPATH).

    python benchmarks/horovod_suite.py SUITE [--mode shim|real|both] [-k SUBSTR] [--timeout 120]
                                             [--json FILE]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SUITE_FILE = "test_torch.py"


def test_ids(suite: Path) -> list[str]:
    """`test_torch.py::Class::test_name` for every test method, in file order (read with ast:
    collecting with pytest would need horovod importable)."""
    tree = ast.parse((suite / SUITE_FILE).read_text(encoding="utf-8"))
    ids = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            ids += [f"{SUITE_FILE}::{node.name}::{f.name}" for f in node.body
                    if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return ids


def command(mode: str, test: str, python: str) -> list[str]:
    pytest = ["-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", test]
    if mode == "shim":
        return [python, "-m", "ddpkit", "launch", "--horovod", "--nproc-per-node", "2",
                "--port", str(free_port()), *pytest]
    return [python, "-m", "horovod.runner.launch", "--gloo", "-np", "2", "-H", "localhost:2",
            python, *pytest]


def free_port() -> int:
    """A port of its own for each run: other runs on this machine may hold 29500."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_one(argv: list[str], suite: Path, timeout: float) -> tuple[str, float, str]:
    """(verdict, seconds, output tail). Each test runs in a session of its own so that a hang
    is ended with its whole process group (launcher, workers) and nothing else."""
    env = dict(os.environ)
    deps = suite / "deps"
    extra = [str(suite)] + ([str(deps)] if deps.is_dir() else [])
    env["PYTHONPATH"] = os.pathsep.join(extra + [p for p in [env.get("PYTHONPATH")] if p])
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=str(suite), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "timeout", time.monotonic() - t0, out[-3000:]
    return verdict(proc.returncode, out), time.monotonic() - t0, out[-3000:]


def verdict(returncode: int, out: str) -> str:
    """pytest's summary lines of both ranks: any failure or error fails the test; a skip on
    some rank with no failure is a skip; no summary at all is an error of the harness."""
    summaries = re.findall(r"(\d+ (?:passed|failed|skipped|errors?)\b[^\n]*?) in [\d.]+s", out)
    words = " ".join(summaries)
    if not summaries:
        return "error"  # pytest never ran to its summary: the launch itself failed
    if returncode != 0 or re.search(r"\d+ (failed|error)", words):
        return "fail"
    if "skipped" in words:
        return "skip"
    return "pass"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("suite", type=Path, help=f"folder with {SUITE_FILE} and common.py")
    parser.add_argument("--mode", choices=("shim", "real", "both"), default="shim")
    parser.add_argument("-k", dest="match", default="", help="only tests whose name has this")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--json", type=Path, help="also write the per-test results here")
    parser.add_argument("--rerun", type=Path, help="a --json file of an earlier run: run again "
                        "only its tests that timed out or could not start, and report the merged "
                        "results")
    args = parser.parse_args()
    suite = args.suite.resolve()
    if not (suite / SUITE_FILE).is_file() or not (suite / "common.py").is_file():
        raise SystemExit(f"{suite} has no {SUITE_FILE} and common.py\n"
                         "hint: prepare the suite as this script's docstring says")
    modes = ("shim", "real") if args.mode == "both" else (args.mode,)
    tests = [t for t in test_ids(suite) if args.match in t]
    results: dict[str, dict[str, str]] = {m: {} for m in modes}
    if args.rerun:
        earlier = json.loads(args.rerun.read_text(encoding="utf-8"))
        for mode in modes:
            results[mode] = {t: v for t, v in earlier.get(mode, {}).items()
                             if v in ("pass", "skip", "fail") and t in tests}
    for test in tests:
        for mode in modes:
            if test in results[mode]:
                continue
            what, secs, tail = run_one(command(mode, test, args.python), suite, args.timeout)
            results[mode][test] = what
            print(f"{mode:4} {what:7} {secs:6.1f}s {test.split('::')[-1]}", flush=True)
            if what in ("fail", "timeout", "error") and os.environ.get("HVDSUITE_VERBOSE"):
                print(tail, flush=True)
    for mode in modes:
        counts = {k: list(results[mode].values()).count(k)
                  for k in ("pass", "skip", "fail", "timeout", "error")}
        print(f"{mode}: {len(tests)} tests, " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    if len(modes) == 2:
        differ = [t for t in tests if results["real"][t] == "pass" and results["shim"][t] != "pass"]
        print(f"passed under real Horovod but not under the shim ({len(differ)}):")
        for t in differ:
            print(f"  {t.split('::')[-1]}: {results['shim'][t]}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
