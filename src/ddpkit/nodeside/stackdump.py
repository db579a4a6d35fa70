# Stack dump: sent to a node and run in the agent (op "probe": collect(request) is called).
# Finds the torchrun workers of a run on this node (by their environment: RANK, LOCAL_RANK,
# TORCHELASTIC_RUN_ID) and, where a node has no workers yet, the torchrun agents (a rendezvous
# that never completed), then takes every Python stack at once with `py-spy dump --json`.
# py-spy is looked up next to this interpreter, on PATH and in ~/.cache/ddpkit/bin; when it is
# missing, the launcher sends the binary in the request ("pyspy_b64") and it is kept in the
# cache. With "watch" in the request (launch --hang-timeout), it also reads each rank's progress
# and flight recorder from the folder the rank's watcher thread serves (DDPKIT_WATCH_DIR, see
# nodeside/bootstrap.py) and sends back a small summary of them. Stdlib only, Python 3.6+.
import base64
import io
import os
import pickle
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

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
    picked = select(procs)
    chosen = [describe(p) for p in picked]
    out["procs"] = chosen
    want = request.get("watch")
    folders = watch_dirs(picked) if want else {}
    # a rank here that stepped within recent_s: not hung, so neither stacks nor dumps
    stepping = bool(folders) and stepped_recently(folders, want)
    asked = ask_dumps(folders) if folders and not stepping else None  # the dumps run meanwhile
    started = time.time()
    if stepping:
        out["stepping"] = True
    elif pyspy:
        out["pyspy"] = pyspy
        threads = [threading.Thread(target=dump, args=(pyspy, info,
                                                       float(request.get("timeout", 10))))
                   for info in chosen]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        out["missing_pyspy"] = True
    took = round(time.time() - started, 2)
    if folders:
        out["watch"] = gather(folders, want, asked)
        out["watch"]["pyspy_s"] = took
    return out


# ---- the watcher's folder (launch --hang-timeout) -------------------------------------------
FR_PREFIXES = ("fr_rank_", "nccl_rank_")
LIB = re.compile(r"/(site|dist)-packages/|/lib/python\d+\.\d+/|^<frozen ")


def watch_dirs(picked):
    """rank -> the folder its watcher serves (only workers of a launch that asked for one)."""
    out = {}
    for p in picked:
        folder, rank = p["env"].get("DDPKIT_WATCH_DIR"), p["env"].get("RANK", "")
        if p["role"] == "worker" and folder and rank.isdigit():
            out[int(rank)] = folder
    return out


def progress(folder, rank, now):
    text = read(os.path.join(folder, "progress_rank_%d" % rank)) or ""
    parts = text.split()
    try:
        return {"steps": int(parts[0]), "age_s": round(now - float(parts[1]), 2)}
    except (IndexError, ValueError):
        return None


def stepped_recently(folders, want):
    now, recent = time.time(), float(want.get("recent_s", 0))
    return any((progress(f, r, now) or {}).get("age_s", recent + 1) < recent
               for r, f in folders.items())


def ask_dumps(folders):
    """Touch every folder's dump_request; returns the request's time (None: could not)."""
    now, stamp = time.time(), None
    for folder in set(folders.values()):
        path = os.path.join(folder, "dump_request")
        try:
            with open(path, "w") as f:
                f.write("%.3f\n" % now)
            stamp = os.stat(path).st_mtime if stamp is None else min(stamp, os.stat(path).st_mtime)
        except OSError:
            pass
    return stamp


def fresh_dumps(folder, rank, asked):
    """This rank's dumps written after the request: {prefix: path}."""
    out = {}
    for prefix in FR_PREFIXES:
        path = os.path.join(folder, "%s%d.pkl" % (prefix, rank))
        try:
            if os.stat(path).st_mtime >= asked:
                out[prefix] = path
        except OSError:
            pass
    return out


def gather(folders, want, asked):
    """Per rank: its progress and, when dumps were asked for, the last entries of its flight
    recorder (waiting up to fr_wait_s after the request for the watchers to write them)."""
    begun = time.time()
    if asked is not None:
        deadline = asked + float(want.get("fr_wait_s", 4))
        while time.time() < deadline and \
                not all(fresh_dumps(f, r, asked) for r, f in folders.items()):
            time.sleep(0.05)
    now, ranks = time.time(), {}
    for rank, folder in sorted(folders.items()):
        info = {"progress": progress(folder, rank, now), "dumps": {}}
        for prefix, path in sorted(fresh_dumps(folder, rank, asked).items()) if asked else ():
            info["dumps"][prefix] = summarise(read(path, "rb") or b"", want)
        ranks[str(rank)] = info
    return {"asked": asked is not None, "ranks": ranks, "waited_s": round(now - begun, 2),
            "dumped_after_s": round(now - asked, 2) if asked is not None else None}


class PlainUnpickler(pickle.Unpickler):
    """A flight-recorder dump holds dicts, lists and strings: refuse anything else."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError("unexpected %s.%s in a flight-recorder dump" % (module, name))


def summarise(data, want):
    """The last `keep` entries of one dump, small: sequence number, op, state, sizes, process
    group and the innermost frame outside libraries (the user's line)."""
    try:
        dump = PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:
        return {"error": "unreadable dump: %s" % exc}
    keep = int(want.get("keep", 20))
    entries = []
    for e in (dump.get("entries") or [])[-keep:]:
        user = next((f for f in e.get("frames") or [] if not LIB.search(f.get("filename", ""))),
                    None)
        group = e.get("process_group") or ("", "")
        entries.append({
            "seq": e.get("collective_seq_id"), "p2p": bool(e.get("is_p2p")),
            "op": e.get("profiling_name", ""), "state": e.get("state", ""),
            "pg": str(group[0]), "pg_id": str(e.get("pg_id", "")),
            "sizes": e.get("input_sizes") or [],
            "file": os.path.basename(user.get("filename", "")) if user else "",
            "line": user.get("line", 0) if user else 0, "func": user.get("name", "") if user else ""})
    stacks = any("frames" in e for e in (dump.get("entries") or [])[-keep:])
    out = {"version": dump.get("version"), "pg_status": dump.get("pg_status") or {},
           "entries": entries, "bytes": len(data), "stack_traces": stacks}
    if len(data) <= int(want.get("raw_max", 0)):
        out["raw_b64"] = base64.b64encode(data).decode()
    return out
