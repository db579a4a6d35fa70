"""ddpkit's exit bootstrap (nodeside/bootstrap.py) keeps Python's exit semantics exactly: the
same output and exit code as `python SCRIPT` in every case a script can end, and under a real
`ddpkit launch` the atexit handlers, open files, argv, imports and tracebacks a user expects."""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from ddpkit.launch.shutdown import SCRIPT_END
from tests.conftest import ROOT, ddpkit
from tests.launching import SCRIPTS

BOOTSTRAP = str(ROOT / "src" / "ddpkit" / "nodeside" / "bootstrap.py")

SCRIPT = '''\
import atexit, os, sys, threading
import helper
print("argv0", sys.argv[0], "args", sys.argv[1:], "path0", sys.path[0], "name", __name__,
      "file", __file__, helper.WHERE)
atexit.register(lambda: print("atexit first registered, runs last"))
atexit.register(lambda: print("atexit last registered, runs first"))
out = open(os.environ["OUT"], "w")
out.write("left open, flushed at exit")
mode = os.environ["MODE"]

def deeper():
    raise ValueError("planned")

if mode == "raise":
    deeper()
elif mode == "chained":
    try:
        deeper()
    except ValueError as exc:
        raise RuntimeError("while handling") from exc
elif mode == "exit3":
    sys.exit(3)
elif mode == "exit-message":
    sys.exit("goodbye from the script")
elif mode == "exit-none":
    sys.exit()
elif mode == "keyboard":
    raise KeyboardInterrupt
elif mode == "thread":
    import time
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done"))).start()
elif mode == "executor":
    import concurrent.futures, time
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pool.submit(lambda: (time.sleep(0.3), print("pool job done", flush=True)))
print("end of script")
'''


def run(argv, cwd, env):
    done = subprocess.run(argv, cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=60)
    err = "".join(ln for ln in done.stderr.splitlines(True) if not ln.startswith(SCRIPT_END))
    return done.returncode, done.stdout, err


@pytest.fixture()
def project(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text(SCRIPT)
    (tmp_path / "pkg" / "helper.py").write_text("WHERE = 'sibling import works'\n")
    (tmp_path / "pkg" / "broken.py").write_text("x = (\n")
    return tmp_path


@pytest.mark.parametrize("mode", ["ok", "raise", "chained", "exit3", "exit-message",
                                  "exit-none", "keyboard", "thread", "executor"])
@pytest.mark.parametrize("how", ["script", "module"])
def test_same_output_and_exit_code_as_plain_python(project, mode, how):
    target = ["pkg/train.py", "--lr", "1"] if how == "script" else ["-m", "train", "--lr", "1"]
    cwd = project if how == "script" else project / "pkg"
    results = []
    for prefix in ([sys.executable], [sys.executable, BOOTSTRAP]):
        out = project / f"out{len(results)}.txt"
        results.append((*run(prefix + target, cwd, {"MODE": mode, "OUT": str(out)}),
                        out.read_text()))
    plain, boot = results
    if how == "module":  # `python -m` shows runpy's frames first; under ddpkit the user's come first
        plain = (plain[0], plain[1], re.sub(r'  File "<frozen runpy>".*\n', "", plain[2]), plain[3])
    assert boot == plain
    if how == "script":
        assert "argv0 pkg/train.py args ['--lr', '1']" in plain[1]  # what the user typed
        assert "sibling import works" in plain[1]
    assert plain[3] == "left open, flushed at exit"


@pytest.mark.parametrize("target", [["pkg/broken.py"], ["pkg/missing.py"], ["-m", "no_such_mod"]])
def test_scripts_that_cannot_start_fail_as_in_plain_python(project, target):
    plain = run([sys.executable, *target], project, {})
    boot = run([sys.executable, BOOTSTRAP, *target], project, {})
    assert boot == plain and plain[0] != 0


def test_the_end_marker_comes_after_atexit_and_carries_the_exit_code(project):
    raw = subprocess.run([sys.executable, BOOTSTRAP, "pkg/train.py"], cwd=project,
                         env={**os.environ, "MODE": "exit3", "OUT": str(project / "o.txt")},
                         capture_output=True, text=True, timeout=60)
    assert raw.returncode == 3, raw.stderr
    lines = raw.stderr.splitlines()
    assert re.fullmatch(rf"{SCRIPT_END}3 \d+", lines[-1]), raw.stderr  # the very last line
    assert "atexit first registered, runs last" in raw.stdout


def test_under_launch_atexit_still_has_the_group_and_files_are_flushed(tmp_path):
    target = ["exit_semantics.py"]  # relative, as typed: argv[0] stays what the user gave
    done = ddpkit("launch", "--nproc-per-node", "2", *target, env={"OUT_DIR": str(tmp_path)},
                  cwd=str(SCRIPTS), timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    for rank in (0, 1):
        assert f"ATEXIT rank={rank} initialised=True sum=2.0" in done.stdout
        assert (tmp_path / f"rank{rank}.txt").read_text().endswith("never closed")
    assert f"NAME __main__ ARGV0 exit_semantics.py PATH0 {SCRIPTS} sibling module" in done.stdout
    assert SCRIPT_END not in done.stdout + done.stderr  # the launcher's, not the user's


def test_under_launch_the_traceback_starts_in_the_users_file(tmp_path):
    done = ddpkit("launch", "--nproc-per-node", "2", "-m", "exit_semantics", cwd=str(SCRIPTS),
                  env={"OUT_DIR": str(tmp_path), "RAISE_RANK": "1"}, timeout=240)
    assert done.returncode == 1
    rank1 = [ln.split("| ", 1)[1] for ln in (done.stdout + done.stderr).splitlines()
             if re.match(r"localhost:1 +\| ", ln)]
    at = rank1.index("Traceback (most recent call last):")
    source = (SCRIPTS / "exit_semantics.py").read_text().splitlines()
    call, raised = source.index("    fail(rank)") + 1, source.index(
        '    raise ValueError(f"planned error on rank {rank}")') + 1
    script = SCRIPTS / "exit_semantics.py"
    frames = [ln for ln in rank1[at + 1:] if ln.startswith("  File ")]
    assert frames[:2] == [f'  File "{script}", line {call}, in <module>',
                          f'  File "{script}", line {raised}, in fail'], rank1
    assert not any("bootstrap" in ln or "runpy" in ln for ln in rank1), rank1
    assert "ValueError: planned error on rank 1" in rank1
    # -m: argv[0] is the module's file, sys.path[0] the working directory, as `python -m`
    assert f"NAME __main__ ARGV0 {script} PATH0 {SCRIPTS} sibling module" in rank1


def test_a_crash_after_the_script_ended_is_named_as_such():
    done = ddpkit("launch", "--nproc-per-node", "2", str(SCRIPTS / "abort_at_shutdown.py"),
                  env={"ABORT_RANK": "1"}, timeout=240)
    assert done.stdout.count("TRAINED") == 2
    assert done.returncode == 1  # a worker did crash: torchrun's code, not success
    summary = " ".join(done.stderr.split())  # rich wraps the line
    assert ("FAILED at exit on localhost (exit 1): all ranks finished training; rank 1 crashed "
            "during interpreter shutdown (killed by SIGABRT)") in summary, done.stderr[-2000:]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signals_end_the_script_as_in_plain_python(tmp_path, sig):
    """SIGTERM (torchrun's teardown) still kills the worker; SIGINT is a KeyboardInterrupt."""
    script = tmp_path / "wait.py"
    script.write_text("import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    codes = []
    for prefix in ([sys.executable], [sys.executable, BOOTSTRAP]):
        # A shell that started the test run in the background (`make test &`) hands its
        # children SIGINT ignored, and Python then never installs KeyboardInterrupt: give
        # both interpreters the default disposition a terminal would.
        proc = subprocess.Popen(prefix + [str(script)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        codes.append((proc.returncode, "KeyboardInterrupt" in err))
    assert codes[0] == codes[1] == (-sig, sig == signal.SIGINT)


def test_the_bootstrap_never_imports_torch(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import sys\nprint('torch' in sys.modules)\n")
    code, out, _ = run([sys.executable, BOOTSTRAP, str(script)], tmp_path, {})
    assert (code, out) == (0, "False\n")


assert Path(BOOTSTRAP).exists()
