"""Gather a Snapshot of this machine: every probe runs concurrently, none imports torch.

This is the only module of the doctor that acts (files, sockets, subprocesses); the checks
themselves are pure functions of the Snapshot.
"""

from __future__ import annotations

import errno
import importlib.metadata as md
import os
import platform
import resource
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Mapping

from ddpkit.launch.proc import run_cmd, which
from ddpkit.parsers.nvsmi import SmiReport, parse_smi_query
from ddpkit.parsers.osrelease import OsInfo, parse_os_release
from ddpkit.prepare.checks.base import Iface, Snapshot, SshFacts

# The variables the checks read; nothing else leaves this machine in --json output.
ENV_PREFIXES = ("NCCL_", "TORCH_", "GLOO_", "MASTER_", "CUDA_", "OMP_", "TORCHELASTIC_")
ENV_NAMES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "NNODES", "NODE_RANK", "LD_LIBRARY_PATH")
COMPANIONS = ("horovod", "accelerate", "deepspeed", "nvidia-ml-py", "mpi4py")


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


def _resolve(name: str) -> tuple[tuple[str, ...], str]:
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        return (), str(exc.strerror or exc)
    return tuple(dict.fromkeys(i[4][0] for i in infos)), ""


def _interfaces() -> tuple[Iface, ...]:
    import ipaddress

    import psutil

    stats = psutil.net_if_stats()
    out = []
    for name, addrs in sorted(psutil.net_if_addrs().items()):
        v4 = []
        for a in addrs:
            if a.family == socket.AF_INET:
                prefix = ipaddress.IPv4Network(f"0.0.0.0/{a.netmask or '255.255.255.255'}").prefixlen
                v4.append(f"{a.address}/{prefix}")
        out.append(Iface(name, tuple(v4), bool(stats.get(name) and stats[name].isup)))
    return tuple(out)


def _port_bind_error(port: int) -> str:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TCPStore does
    try:
        sock.bind(("0.0.0.0", port))
    except OSError as exc:
        return "in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
    finally:
        sock.close()
    return ""


def _gpu() -> tuple[SmiReport | None, str, str]:
    """(report, source, error). NVML when nvidia-ml-py is installed, else nvidia-smi -q."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            return _nvml_report(pynvml), "nvml", ""
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            nvml_error = str(exc)
        else:  # pragma: no cover
            nvml_error = ""
    else:
        nvml_error = ""
    res = run_cmd(["nvidia-smi", "-q"], timeout=15)
    if res.error == "not found":
        return None, "", nvml_error or "nvidia-smi not found"
    if not res.ok:
        text = (res.stdout + res.stderr).strip().splitlines()
        return None, "nvidia-smi", res.error or (text[0] if text else f"exit {res.returncode}")
    return parse_smi_query(res.stdout), "nvidia-smi", ""


def _nvml_report(pynvml) -> SmiReport:
    from ddpkit.parsers.nvsmi import GpuInfo

    def s(x):
        return x.decode() if isinstance(x, bytes) else str(x)

    pynvml.nvmlInit()
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(GpuInfo(index=i, name=s(pynvml.nvmlDeviceGetName(h)),
                                memory_total_mib=int(mem.total // (1024 * 1024)),
                                uuid=s(pynvml.nvmlDeviceGetUUID(h)),
                                bus_id=s(pynvml.nvmlDeviceGetPciInfo(h).busId)))
        return SmiReport(driver_version=s(pynvml.nvmlSystemGetDriverVersion()),
                         cuda_version=f"{cuda // 1000}.{(cuda % 1000) // 10}", gpus=tuple(gpus))
    finally:
        pynvml.nvmlShutdown()


def _firewall() -> tuple[dict[str, str], str]:
    """Raw outputs of each firewall front-end that exists here, plus why rules were unreadable."""
    outputs: dict[str, str] = {}
    problems: list[str] = []
    if which("firewall-cmd"):
        state = run_cmd(["firewall-cmd", "--state"], timeout=10)
        outputs["firewalld_state"] = (state.stdout or state.stderr).strip()
        if outputs["firewalld_state"] == "running":
            listed = run_cmd(["firewall-cmd", "--list-all"], timeout=10)
            outputs["firewalld_list"] = listed.stdout
            if not listed.ok:
                problems.append(f"firewall-cmd --list-all: {(listed.stderr or listed.error).strip()}")
    for key, argv in (("ufw", ["ufw", "status", "verbose"]), ("iptables", ["iptables", "-S"]),
                      ("nft", ["nft", "list", "ruleset"])):
        if not which(argv[0]):
            continue
        res = run_cmd(argv, timeout=10)
        if res.ok:
            outputs[key] = res.stdout
        else:
            problems.append(f"{' '.join(argv)}: {(res.stderr or res.error).strip().splitlines()[0] if (res.stderr or res.error).strip() else 'exit ' + str(res.returncode)}")
    return outputs, "; ".join(problems)


def _ssh_facts() -> SshFacts:
    home = Path(os.path.expanduser("~"))
    ssh_dir = home / ".ssh"

    def mode(p: Path) -> int | None:
        try:
            return p.stat().st_mode & 0o777
        except OSError:
            return None

    keys = tuple(sorted(p.name for p in ssh_dir.glob("id_*") if not p.name.endswith(".pub"))) \
        if ssh_dir.is_dir() else ()
    return SshFacts(client=which("ssh") or "", home=str(home), dir_mode=mode(ssh_dir),
                    authorized_keys_mode=mode(ssh_dir / "authorized_keys"), private_keys=keys)


def _companions() -> dict[str, str]:
    out = {}
    for name in COMPANIONS:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            continue
    return out


def _os_info() -> OsInfo:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            return parse_os_release(Path(path).read_text())
        except OSError:
            continue
    return OsInfo()


def _shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def collect(environ: Mapping[str, str] | None = None, master_port: int | None = None) -> Snapshot:
    from ddpkit.prepare.torchinfo import torch_facts

    env = relevant_env(os.environ if environ is None else environ)
    raw_port = env.get("MASTER_PORT", "") or "29500"
    port = master_port or (int(raw_port) if raw_port.isdigit() and 0 < int(raw_port) < 65536 else 0)
    hostname = socket.gethostname()
    master_addr = env.get("MASTER_ADDR", "")
    jobs: dict[str, Callable] = {
        "hostname": lambda: _resolve(hostname),
        "master": lambda: _resolve(master_addr) if master_addr else ((), ""),
        "torch": torch_facts,
        "gpu": _gpu,
        "ifaces": _interfaces,
        "port": lambda: _port_bind_error(port) if port else f"MASTER_PORT={raw_port} is not a TCP port",
        "firewall": _firewall,
        "ssh": _ssh_facts,
        "companions": _companions,
        "os": _os_info,
    }
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {k: pool.submit(fn) for k, fn in jobs.items()}
        got = {k: f.result() for k, f in futures.items()}
    gpu, gpu_source, gpu_error = got["gpu"]
    firewall, unreadable = got["firewall"]
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return Snapshot(
        hostname=hostname, hostname_addrs=got["hostname"][0], hostname_error=got["hostname"][1],
        python_version=platform.python_version(), python_executable=sys.executable,
        in_venv=sys.prefix != getattr(sys, "base_prefix", sys.prefix),
        conda_env=os.environ.get("CONDA_DEFAULT_ENV", "") if environ is None else environ.get("CONDA_DEFAULT_ENV", ""),
        os=got["os"], kernel=platform.release(), torch=got["torch"],
        gpu=gpu, gpu_source=gpu_source, gpu_error=gpu_error, interfaces=got["ifaces"], env=env,
        master_port=port, port_bind_error=got["port"], firewall=firewall,
        firewall_unreadable=unreadable, master_addr_resolved=got["master"][0],
        master_addr_error=got["master"][1], shm_bytes=_shm_bytes(),
        nofile=resource.getrlimit(resource.RLIMIT_NOFILE),
        memlock=resource.getrlimit(resource.RLIMIT_MEMLOCK), cpu_count=cpus,
        ssh=got["ssh"], companions=got["companions"], is_root=os.geteuid() == 0,
    )
