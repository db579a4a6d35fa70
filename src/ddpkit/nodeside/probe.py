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
    for base in sys.path:
        path = os.path.join(base or ".", "torch", "version.py")
        if os.path.isfile(path):
            m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", open(path).read())
            return m.group(1) if m else "unknown"
    return ""


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
    return {
        "hostname": name,
        "hostname_addrs": resolved,
        "addrs": ipv4_addrs(),
        "gpus": len([d for d in glob.glob("/dev/nvidia[0-9]*") if re.search(r"nvidia\d+$", d)]),
        "python": platform.python_version(),
        "executable": sys.executable,
        "torch": torch_version(),
        "workdir_ok": wd_ok,
        "script_ok": script_ok,
        "missing": [m for m in need.split(",") if m and importlib.util.find_spec(m) is None],
    }


if __name__ == "__main__":  # as `python -c`; probe.py's local path calls collect() directly
    print(json.dumps(collect(*(sys.argv[1:] + ["", "", "file", ""])[:4])))
