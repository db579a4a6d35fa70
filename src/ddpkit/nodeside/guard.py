# Node guard: runs one node's torchrun and makes sure nothing of it outlives the launcher.
#
# Started as `python -c "<loader>" ddpkit-guard RUN_ID` (see supervise.GUARD_LOADER): the loader
# reads this source from stdin's first line (a JSON string), so `ps` shows a short command line.
# stdin, next line: JSON {"argv": [...], "env": {...}, "cwd": "...", "grace": 5,
#                          "files": {"name": "text"}}; "@TMP@" in argv and env is the node's run
#                          folder (the files are written there, and it is removed at the end)
# After that line stdin stays open for the whole run. EOF on stdin means "stop": the launcher
# closed it (teardown), or it died (SIGKILL), or its SSH session dropped. Then the whole process
# tree is terminated: TERM, then KILL after the grace period. The guard is a child subreaper,
# so workers that torchrun started in new sessions stay in its tree and cannot escape.
# Last line on stderr: "@@ddpkit-node-exit {json}". Stdlib only, Python 3.6+.
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

MARK = "@@ddpkit-node-exit "

# What a process needs to run; under clean_env everything else comes from the launcher's list.
CLEAN_ENV_KEEP = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TERM", "TMPDIR",
                  "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH")


def proc_table():
    """{pid: (ppid, state)} for every process we can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may contain spaces and parentheses: split after the last ')'
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1:
            table[int(entry)] = (int(fields[1]), fields[0])
    return table


def live_descendants(pid):
    table = proc_table()
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for kid, (ppid, state) in table.items():
            if ppid == parent:
                todo.append(kid)
                if state != "Z":
                    out.append(kid)
    return out


def signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def reap_orphans(keep):
    """Collect zombies that were reparented to us (we are their subreaper), not our own child."""
    me = os.getpid()
    for pid, (ppid, state) in proc_table().items():
        if ppid == me and pid != keep and state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def stop_tree(child, grace):
    """TERM the tree (torchrun forwards it to its workers), KILL whatever is left after grace."""
    me = os.getpid()
    signal_all(live_descendants(me), signal.SIGTERM)
    deadline = time.time() + grace
    while time.time() < deadline and live_descendants(me):
        reap_orphans(child.pid)
        time.sleep(0.05)
    for _ in range(50):  # KILL until nothing is left: orphans reparent to us meanwhile
        left = live_descendants(me)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        time.sleep(0.05)
        reap_orphans(child.pid)
    child.wait()
    reap_orphans(child.pid)


def finish(code, **extra):
    info = {"code": code}
    info.update(extra)
    sys.stderr.flush()
    sys.stdout.flush()
    sys.stderr.write("\n" + MARK + json.dumps(info) + "\n")
    sys.stderr.flush()
    os._exit(code)


def read_config():
    line = sys.stdin.buffer.readline()
    if not line:
        os._exit(0)  # the launcher went away before the run started
    return json.loads(line.decode())


def enter_workdir(cfg, tmp):
    try:
        os.chdir(cfg.get("cwd") or ".")
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.stderr.write("ddpkit: working directory %s: %s\n" % (cfg.get("cwd"), exc.strerror))
        finish(2, error="workdir")


def command(cfg, tmp):
    """The node's argv and environment, with the files it needs written into tmp."""
    argv = [a.replace("@TMP@", tmp) for a in cfg["argv"]]
    for name, text in cfg.get("files", {}).items():
        path = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    env = dict(os.environ)
    if cfg.get("clean_env"):
        # only what a process needs to run; everything else comes from the launcher's list
        env = {k: v for k, v in os.environ.items() if k in CLEAN_ENV_KEEP}
    env.update({k: v.replace("@TMP@", tmp) for k, v in cfg.get("env", {}).items()})
    return argv, env


def start(argv, env, tmp):
    try:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        sys.stderr.write("ddpkit: cannot start %s: %s\n" % (argv[0], exc.strerror))
        finish(127, error="exec")


def watch(child, heartbeat):
    """Wait for the child to end, a signal, stdin's end or a missed heartbeat; say which."""
    stop = threading.Event()
    torn = []

    def on_signal(signum, frame):
        torn.append(signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    heard = [time.time()]

    def watch_stdin():
        # read1: whatever has arrived (heartbeat newlines), b"" only at EOF
        while sys.stdin.buffer.read1(4096):
            heard[0] = time.time()
        torn.append("eof")
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while child.poll() is None and not stop.is_set():
        stop.wait(0.02)
        if heartbeat and time.time() - heard[0] > heartbeat:
            torn.append("no heartbeat from the launcher for %gs" % heartbeat)
            stop.set()
    return str(torn[0]) if torn else ""


def main():
    cfg = read_config()
    try:
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass
    tmp = tempfile.mkdtemp(prefix="ddpkit-node-")
    enter_workdir(cfg, tmp)
    argv, env = command(cfg, tmp)
    child = start(argv, env, tmp)
    why = watch(child, float(cfg.get("heartbeat") or 0))
    teardown = child.poll() is None
    # on teardown TERM then KILL after the grace; else torchrun is done and nothing may linger
    stop_tree(child, float(cfg.get("grace", 5)) if teardown else 1.0)
    code = child.returncode
    if code is not None and code < 0:
        code = 128 - code
    shutil.rmtree(tmp, ignore_errors=True)
    finish(code or 0, torn_down=teardown, why=why)


main()
