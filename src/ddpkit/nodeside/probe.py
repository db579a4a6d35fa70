# Node probe: prints one JSON line with what the launcher needs to plan a run here.
# argv: [workdir, script or "", "module" or "file", modules that must be importable (a,b)].
# Stdlib only, Python 3.6+.
import glob
import json
import os
import platform
import re
import socket
import subprocess
import sys


def ipv4_addrs():
    """[(iface, "a.b.c.d/prefix")] from `ip -o -4 addr`, else one address per interface (ioctl)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, universal_newlines=True, timeout=5).stdout
        found = re.findall(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\d+\.\d+\.\d+\.\d+/\d+)", out, re.M)
        if found:
            return found
    except (OSError, subprocess.SubprocessError):
        pass
    import fcntl
    import struct

    addrs = []
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _, name in socket.if_nameindex():
        req = struct.pack("256s", name[:15].encode())
        try:
            ip = socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, req)[20:24])
            mask = fcntl.ioctl(s.fileno(), 0x891B, req)[20:24]
        except OSError:
            continue
        prefix = bin(int.from_bytes(mask, "big")).count("1")
        addrs.append((name, "%s/%d" % (ip, prefix)))
    return addrs


def torch_version():
    """(version, CUDA it was built for or "" for a CPU/ROCm build), from torch/version.py."""
    for base in sys.path:
        path = os.path.join(base or ".", "torch", "version.py")
        if os.path.isfile(path):
            text = open(path).read()
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
            cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", text, re.M)
            return (m.group(1) if m else "unknown"), (cuda.group(1) if cuda else "")
    return "", ""


def executable_problem(workdir, name):
    """(problem, fix) for a --no-python entry point, started as torchrun does (execvp: a name
    without '/' is looked up in PATH only, never in the working directory)."""
    import shutil

    if "/" not in name:
        if shutil.which(name):
            return "", ""
        if os.path.isfile(os.path.join(workdir, name)):
            return ("not found in PATH (a name without '/' is looked up in PATH, not in the "
                    "working directory)", "write ./%s" % name)
        return "command not found in PATH", "give its path, e.g. ./%s" % name
    path = os.path.join(workdir, name)
    if not os.path.isfile(path):
        return "not found in %s" % workdir, "check the path; every node needs it at the same place"
    if not os.access(path, os.X_OK):
        return "not executable", "chmod +x %s (and start it with #!/bin/sh or similar)" % name
    return "", ""


def collect(workdir, script, kind, need=""):
    import importlib.util

    name = socket.gethostname()
    try:
        resolved = sorted({i[4][0] for i in socket.getaddrinfo(name, None, socket.AF_INET)})
    except OSError:
        resolved = []
    wd_ok = os.path.isdir(workdir) if workdir else True
    script_ok = True
    if script and kind == "file":
        script_ok = os.path.isfile(os.path.join(workdir, script) if wd_ok else script)
    exec_problem, exec_fix = executable_problem(workdir if wd_ok else ".", script) \
        if script and kind == "exec" else ("", "")
    torch, torch_cuda = torch_version()
    return {
        "hostname": name,
        "hostname_addrs": resolved,
        "addrs": ipv4_addrs(),
        "gpus": len([d for d in glob.glob("/dev/nvidia[0-9]*") if re.search(r"nvidia\d+$", d)]),
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch,
        "torch_cuda": torch_cuda,
        "workdir_ok": wd_ok,
        "script_ok": script_ok,
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "exec_problem": exec_problem,
        "exec_fix": exec_fix,
        "missing": [m for m in need.split(",") if m and importlib.util.find_spec(m) is None],
    }


if __name__ == "__main__":  # as `python -c`; probe.py's local path calls collect() directly
    print(json.dumps(collect(*(sys.argv[1:] + ["", "", "file", ""])[:4])))
