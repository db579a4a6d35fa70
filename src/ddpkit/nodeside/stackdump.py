# Stack dump: sent to a node and run in the agent (op "probe": collect(request) is called).
# Finds the torchrun workers of a run on this node (by their environment: RANK, LOCAL_RANK,
# TORCHELASTIC_RUN_ID) and, where a node has no workers yet, the torchrun agents (a rendezvous
# that never completed), then takes every Python stack at once with `py-spy dump --json`.
# py-spy is looked up next to this interpreter, on PATH and in ~/.cache/ddpkit/bin; when it is
# missing, the launcher sends the binary in the request ("pyspy_b64") and it is kept in the
# cache. Stdlib only, Python 3.6+.
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import threading

TORCHRUN = re.compile(r"(^|/)torchrun$")
AGENT_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return None


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "ddpkit", "bin")


def find_pyspy(want_version):
    """A py-spy that can run here: next to this interpreter, on PATH, or the cached copy."""
    cached = os.path.join(cache_dir(), "py-spy-" + want_version) if want_version else ""
    for path in (os.path.join(os.path.dirname(sys.executable), "py-spy"), shutil.which("py-spy"),
                 cached):
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return ""


def install_pyspy(data, version):
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "py-spy-" + version)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(base64.b64decode(data))
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)  # atomic: a concurrent dump never sees half a binary
    return path


def environ(pid):
    raw = read("/proc/%d/environ" % pid, "rb")
    if raw is None:
        return None
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            out[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return out


def cmdline(pid):
    raw = read("/proc/%d/cmdline" % pid, "rb") or b""
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def ppid_of(pid):
    stat = read("/proc/%d/stat" % pid) or ""
    fields = stat[stat.rfind(")") + 2:].split()
    return int(fields[1]) if len(fields) > 1 else 0


def netns(pid):
    try:
        return os.readlink("/proc/%s/ns/net" % pid)
    except OSError:
        return None


def flag_value(argv, name):
    """--name V or --name=V (torchrun also takes --name_with_underscores)."""
    names = (name, name.replace("-", "_"))
    for i, arg in enumerate(argv):
        for n in names:
            if arg == n and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(n + "="):
                return arg[len(n) + 1:]
    return None


def is_agent(argv):
    """torchrun's own process (the elastic agent): `torchrun ...`, `python .../torchrun ...`
    or `python -m torch.distributed.run ...` (not a wrapper such as `timeout 60 torchrun`)."""
    if not argv:
        return False
    if TORCHRUN.search(argv[0]):
        return True
    if "python" not in os.path.basename(argv[0]):
        return False
    return (len(argv) > 1 and bool(TORCHRUN.search(argv[1]))) or \
        (len(argv) > 2 and argv[1] == "-m" and argv[2] in AGENT_MODULES)


def scan(run_id):
    """Workers (every process with torchrun's RANK/LOCAL_RANK) and torchrun agents that
    belong to the run: by TORCHELASTIC_RUN_ID / --rdzv-id, or by descending from the run's
    ddpkit guard (`ddpkit-guard RUN_ID` in its argv; --standalone picks its own run id)."""
    me = os.getpid()
    ours = {me, os.getppid()}
    table, unreadable = {}, 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in ours:
            pid = int(entry)
            table[pid] = (ppid_of(pid), cmdline(pid))
    guards = {pid for pid, (_, argv) in table.items()
              if run_id and "ddpkit-guard" in argv and run_id in argv}

    def in_run(pid):
        seen = 0
        while pid > 1 and seen < 64:
            if pid in guards:
                return True
            pid, seen = table.get(pid, (0, []))[0], seen + 1
        return False

    procs = {}
    for pid, (_, argv) in table.items():
        env = environ(pid)
        if env is None:
            if argv:
                unreadable += 1  # another user's process: we cannot tell whose run it is
            continue
        if "RANK" in env and "LOCAL_RANK" in env:
            if run_id and env.get("TORCHELASTIC_RUN_ID") != run_id and not in_run(pid):
                continue
            procs[pid] = {"pid": pid, "role": "worker", "env": env, "argv": argv}
        elif is_agent(argv):
            rdzv = flag_value(argv, "--rdzv-id")
            if run_id and rdzv != run_id and not in_run(pid):
                continue
            procs[pid] = {"pid": pid, "role": "agent", "env": env, "argv": argv,
                          "rdzv_id": rdzv}
    return procs, unreadable


def select(procs):
    """One process per rank (a DataLoader worker inherits RANK: keep the top-most), agents
    only where they have no workers (they wait in the rendezvous), this node's own processes
    first (on a host with several network namespaces every node sees every process)."""
    parents = {pid: ppid_of(pid) for pid in procs}
    out = []
    for pid, p in procs.items():
        parent = procs.get(parents[pid])
        if p["role"] == "worker" and parent and parent["role"] == "worker" and \
                parent["env"].get("RANK") == p["env"].get("RANK"):
            continue
        if p["role"] == "agent":
            if any(pp == pid and procs[q]["role"] == "worker" for q, pp in parents.items()):
                continue
        out.append(p)
    mine = netns(os.getpid())
    local = [p for p in out if netns(p["pid"]) == mine]
    return local if local or not out else out


def describe(p):
    env = p["env"]
    info = {"pid": p["pid"], "role": p["role"], "cmdline": p["argv"][:12]}
    if p["role"] == "worker":
        for key, name in (("RANK", "rank"), ("LOCAL_RANK", "local_rank"),
                          ("WORLD_SIZE", "world_size"), ("GROUP_RANK", "group_rank")):
            value = env.get(key, "")
            info[name] = int(value) if value.lstrip("-").isdigit() else None
        info["run_id"] = env.get("TORCHELASTIC_RUN_ID", "")
    else:
        info["run_id"] = p.get("rdzv_id") or ""
        nnodes = flag_value(p["argv"], "--nnodes") or ""
        info["nnodes"] = nnodes
    return info


def dump(pyspy, info, timeout):
    try:
        done = subprocess.run([pyspy, "dump", "--pid", str(info["pid"]), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        info["error"] = "py-spy did not answer within %gs" % timeout
        return
    except OSError as exc:
        info["error"] = "cannot run %s: %s" % (pyspy, exc.strerror)
        return
    if done.returncode != 0:
        text = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        info["error"] = text.splitlines()[-1] if text else "py-spy exit %d" % done.returncode
        return
    import json

    try:
        info["threads"] = json.loads(done.stdout.decode("utf-8", "replace"))
    except ValueError:
        info["error"] = "py-spy printed no stack"


def ptrace_facts():
    scope = (read("/proc/sys/kernel/yama/ptrace_scope") or "").strip()
    cap = 0
    for line in (read("/proc/self/status") or "").splitlines():
        if line.startswith("CapEff:"):
            cap = int(line.split()[1], 16)
    container = bool(read("/.dockerenv", "rb") is not None or
                     "docker" in (read("/proc/1/cgroup") or "") or
                     os.environ.get("container"))
    return {"ptrace_scope": int(scope) if scope.isdigit() else None,
            "cap_sys_ptrace": bool(cap & (1 << 19)), "uid": os.getuid(),
            "container": container}


def collect(request):
    run_id = request.get("run_id") or ""
    out = {"hostname": socket.gethostname(), "ptrace": ptrace_facts(), "procs": []}
    pyspy = find_pyspy(request.get("pyspy_version", ""))
    if not pyspy and request.get("pyspy_b64"):
        try:
            pyspy = install_pyspy(request["pyspy_b64"], request.get("pyspy_version", "x"))
        except OSError as exc:
            out["error"] = "cannot store py-spy in %s: %s" % (cache_dir(), exc.strerror)
            return out
    procs, out["unreadable"] = scan(run_id)
    chosen = [describe(p) for p in select(procs)]
    out["procs"] = chosen
    if not pyspy:
        out["missing_pyspy"] = True
        return out
    out["pyspy"] = pyspy
    threads = [threading.Thread(target=dump, args=(pyspy, info, float(request.get("timeout", 10))))
               for info in chosen]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out
