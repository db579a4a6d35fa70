"""A virtual cluster on one machine: N network namespaces on a bridge, one sshd each.

Every node has its own IPv4 address, hostname, /etc/hosts, firewall (iptables in its
namespace) and sshd, so `ssh node1 ...` is a real SSH session to a real address. The
filesystem is shared, like an NFS home: one venv serves every node. Needs root, iproute2,
openssh-server, util-linux (unshare, nsenter). Everything is removed by `down()`, which
also runs at interpreter exit, even when a test fails.

    with VCluster(3) as vc:
        vc.ssh_config          # pass to `ddpkit launch --ssh-config`
        vc.nodes[1].run(["iptables", "-S"])   # inside node1's namespaces

`VCluster(3, bare=True)` starts the nodes as a newcomer finds real servers: sshd accepts only
the root password (`vc.password`, through a per-node /etc/shadow), every node has its own empty
~/.ssh, and nothing knows any key. Each node's private mount namespace binds its own
/etc/passwd and /etc/shadow, where root's home is the node's directory `home/` (an overlay or a
bind on /root itself does not work here: /root holds the interpreters, and pyenv's lock file in
it changes under an overlay, which hangs every login shell). `vc.client_argv(argv)` runs a
command as the launching machine with its own empty ~/.ssh the same way (an ssh config there
names the nodes); `vc.askpass_env()` answers the password prompt.
`private_files=("/etc/nftables.conf",)` gives every node its own copy of such host files, so
what a test writes there stays on the node.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")
PREFIX = "ddpkit-"  # namespaces are named ddpkit-<pid>-node<i> (ddpkit-<pid>-x<k>-node<i>)
_CLUSTERS = itertools.count()  # clusters made by this process: a second one needs own names


class ClusterUnavailable(RuntimeError):
    """The machine cannot host the virtual cluster (not root, missing tools, ...)."""


def _sh(argv: list[str], check: bool = True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, **kw)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


def missing_requirements() -> str:
    """'' when this machine can host a virtual cluster, else what is missing."""
    if os.geteuid() != 0:
        return "the virtual cluster needs root (ip netns, sshd)"
    for tool in ("ip", "unshare", "nsenter", "ssh", "ssh-keygen", "iptables"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists():
            return f"'{tool}' is not installed (apt-get install iproute2 openssh-server iptables)"
    if not Path("/usr/sbin/sshd").exists():
        return "sshd is not installed (apt-get install openssh-server)"
    return ""


def cleanup_stale() -> None:
    """Remove namespaces and links left by a test process that died without cleaning up."""
    if not NETNS_DIR.is_dir():
        return
    for ns in NETNS_DIR.glob(f"{PREFIX}*-node*"):
        pid = int(ns.name.split("-")[1]) if ns.name.split("-")[1].isdigit() else 0
        if pid and Path(f"/proc/{pid}").exists():
            continue
        _kill_ns_pids(ns.name)
        _sh(["ip", "netns", "del", ns.name], check=False)
        part = ns.name.split("-")[2] if ns.name.count("-") == 3 else ""
        _sh(["ip", "link", "del", f"dk{pid}{part}br"], check=False)


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _kill_ns_pids(ns: str) -> None:
    pids = _sh(["ip", "netns", "pids", ns], check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


@dataclass
class Node:
    index: int
    name: str  # as the ssh config and every node's /etc/hosts call it: node0, node1, ...
    ns: str
    ip: str
    veth: str  # the host end of the veth pair, on the bridge (tc rate limits go here)
    dir: Path
    extra_sshd_config: list[str] = field(default_factory=list)
    sshd: subprocess.Popen | None = None
    mounts: list[str] = field(default_factory=list)  # shell commands run before sshd starts

    @property
    def dot_ssh(self) -> Path:
        """What this node sees as root's ~/.ssh (bare clusters only)."""
        return self.dir / "home" / ".ssh"

    @property
    def hosts_file(self) -> Path:
        return self.dir / "hosts"

    @property
    def authorized_keys(self) -> Path:
        return self.dir / "authorized_keys"

    def run(self, argv: list[str], check: bool = False, timeout: float = 60,
            env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
        """Run a command in this node's network, mount and UTS namespaces (as its sshd sees them)."""
        if self.sshd is None:
            raise RuntimeError(f"{self.name} is not up")
        enter = ["nsenter", "-t", str(self.sshd.pid), "-n", "-m", "-u", "--"]
        return _sh(enter + argv, check=check, timeout=timeout, env=env, **kw)

    @contextlib.contextmanager
    def firewall(self, *rule: str):
        """An iptables rule in this node's INPUT chain for the duration of a with block."""
        self.run(["iptables", "-I", "INPUT", *rule], check=True)
        try:
            yield
        finally:
            self.run(["iptables", "-D", "INPUT", *rule], check=True)

    def pids(self) -> list[int]:
        """Every process in the node's network namespace except sshd's own (its listener, and
        session processes that wait for a dead connection to time out)."""
        out = _sh(["ip", "netns", "pids", self.ns], check=False).stdout.split()
        return [int(p) for p in out if p.isdigit() and _comm(int(p)) not in ("sshd", "")]

    def write_hosts(self, text: str) -> None:
        # In place: sed -i or a rename would swap the inode and the bind mount keeps the old one.
        with open(self.hosts_file, "w") as f:
            f.write(text)


class VCluster:
    def __init__(self, n: int = 3, base_dir: str | None = None, *, bare: bool = False,
                 password: str = "ddpkit-bare-test", private_files: tuple[str, ...] = ()) -> None:
        self.n = n
        self.bare, self.password = bare, password
        self.private_files = tuple(f for f in private_files if Path(f).is_file())
        self.pid = os.getpid()
        # the session's cluster and a module's bare one can be up together in one process
        k = next(_CLUSTERS)
        self.part = f"x{k}" if k else ""
        self.tag = f"dk{self.pid}{self.part}"
        self.dir = Path(tempfile.mkdtemp(prefix="ddpkit-vcluster-", dir=base_dir))
        self.bridge = f"{self.tag}br"
        self.subnet_prefix = ""
        self.nodes: list[Node] = []
        self.key = self.dir / "id_test"
        self.ssh_config = self.dir / "ssh_config"
        self.known_hosts = self.dir / "known_hosts"
        self._up = False

    # ---- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> VCluster:
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> VCluster:
        why = missing_requirements()
        if why:
            raise ClusterUnavailable(why)
        cleanup_stale()
        atexit.register(self.down)
        self._up = True
        try:
            self._make_network()
            self._make_keys()
            if self.bare:
                self._make_bare()
            for node in self.nodes:
                node.mounts += self._private_mounts(node)
                self._start_sshd(node)
            self._write_ssh_config()
            self._wait_ssh()
        except Exception:
            self.down()
            raise
        return self

    def down(self) -> None:
        if not self._up:
            return
        self._up = False
        for node in self.nodes:
            if node.sshd and node.sshd.poll() is None:
                node.sshd.kill()
                node.sshd.wait(timeout=5)
            _kill_ns_pids(node.ns)
            _sh(["ip", "link", "del", node.veth], check=False)
            _sh(["ip", "netns", "del", node.ns], check=False)
        _sh(["ip", "link", "del", self.bridge], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    # ---- building blocks -----------------------------------------------------------------
    def _pick_subnet(self) -> str:
        used = _sh(["ip", "-4", "addr"], check=False).stdout
        for i in range(self.pid % 200, self.pid % 200 + 200):
            prefix = f"198.18.{i % 250 + 1}"
            if f" {prefix}." not in used:
                return prefix
        raise ClusterUnavailable("no free 198.18.x.0/24 test subnet")

    def _make_network(self) -> None:
        self.subnet_prefix = self._pick_subnet()
        _sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        _sh(["ip", "addr", "add", f"{self.subnet_prefix}.1/24", "dev", self.bridge])
        _sh(["ip", "link", "set", self.bridge, "up"])
        for i in range(self.n):
            name = f"node{i}"
            node = Node(index=i, name=name, ns=f"{PREFIX}{self.pid}-{self.part + '-' if self.part else ''}{name}",
                        ip=f"{self.subnet_prefix}.{10 + i}", veth=f"{self.tag}v{i}",
                        dir=self.dir / name)
            node.dir.mkdir()
            _sh(["ip", "netns", "add", node.ns])
            # Create the peer inside the namespace directly: no clash with the host's eth0.
            _sh(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0",
                 "netns", node.ns])
            _sh(["ip", "link", "set", node.veth, "master", self.bridge])
            _sh(["ip", "link", "set", node.veth, "up"])
            ns = ["ip", "netns", "exec", node.ns]
            _sh(ns + ["ip", "link", "set", "lo", "up"])
            _sh(ns + ["ip", "addr", "add", f"{node.ip}/24", "dev", "eth0"])
            _sh(ns + ["ip", "link", "set", "eth0", "up"])
            self.nodes.append(node)
        for node in self.nodes:
            node.write_hosts(self.default_hosts(node))

    def default_hosts(self, node: Node) -> str:
        lines = ["127.0.0.1 localhost"] + [f"{n.ip} {n.name}" for n in self.nodes]
        return "\n".join(lines) + "\n"

    def _make_keys(self) -> None:
        _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)])
        pub = (self.dir / "id_test.pub").read_text()
        for node in self.nodes:
            _sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(node.dir / "host_key")])
            node.authorized_keys.write_text(pub)

    def _sshd_config(self, node: Node) -> Path:
        cfg = node.dir / "sshd_config"
        auth = [f"AuthorizedKeysFile {node.authorized_keys}", "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes", "PasswordAuthentication no"]
        if self.bare:  # password only until a key is installed in the node's own ~/.ssh
            auth = ["AuthorizedKeysFile .ssh/authorized_keys", "PermitRootLogin yes",
                    "PubkeyAuthentication yes", "PasswordAuthentication yes"]
        lines = [
            f"ListenAddress {node.ip}:22",
            f"HostKey {node.dir / 'host_key'}",
            f"PidFile {node.dir / 'sshd.pid'}",
            *auth,
            "KbdInteractiveAuthentication no",
            "UsePAM no",  # passwords are then checked against /etc/shadow (the node's own)
            # the test key lives under /tmp; a bare node's own ~/.ssh is checked as sshd would
            "StrictModes yes" if self.bare else "StrictModes no",
            "MaxStartups 200",
            "MaxSessions 200",
            "LogLevel ERROR",
            *node.extra_sshd_config,
        ]
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def _start_sshd(self, node: Node) -> None:
        Path("/run/sshd").mkdir(exist_ok=True)
        cfg = self._sshd_config(node)
        inner = " && ".join([f"mount --bind {node.hosts_file} /etc/hosts", *node.mounts,
                             f"hostname {node.name}",
                             f"exec /usr/sbin/sshd -D -f {cfg} -E {node.dir / 'sshd.log'}"])
        node.sshd = subprocess.Popen(
            ["ip", "netns", "exec", node.ns, "unshare", "--mount", "--uts",
             "--propagation", "private", "sh", "-c", inner],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True)

    def restart_sshd(self, node: Node, extra_config: list[str] | None = None) -> None:
        """Restart one node's sshd (e.g. with `SetEnv PATH=...`), keeping its address."""
        if node.sshd:
            node.sshd.kill()
            node.sshd.wait(timeout=5)
        node.extra_sshd_config = list(extra_config or [])
        self._start_sshd(node)
        self._wait_ssh([node])

    def _write_ssh_config(self) -> None:
        hosts = "".join(f"Host {n.name}\n  HostName {n.ip}\n" for n in self.nodes)
        self.ssh_config.write_text(
            hosts
            + "Host *\n"
            f"  User root\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking no\n"
            "  BatchMode yes\n  LogLevel ERROR\n  ConnectTimeout 5\n")

    def ssh(self, node: Node, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return _sh(["ssh", "-F", str(self.ssh_config), node.name, command], check=False,
                   timeout=timeout)

    def _wait_ssh(self, nodes: list[Node] | None = None, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        for node in nodes or self.nodes:
            while True:
                if node.sshd and node.sshd.poll() is not None:
                    err = node.sshd.stderr.read().decode() if node.sshd.stderr else ""
                    raise RuntimeError(f"sshd on {node.name} exited: {err.strip()}")
                if self.bare and _ssh_banner(node.ip):  # no key works on a bare node
                    break
                if not self.bare and self.ssh(node, "true", timeout=10).returncode == 0:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sshd on {node.name} ({node.ip}) did not answer in {timeout}s")
                time.sleep(0.2)

    # ---- helpers for tests -----------------------------------------------------------------
    def hosts_spec(self, slots: int = 1, nodes: list[Node] | None = None) -> str:
        return ",".join(f"{n.name}:{slots}" for n in (nodes or self.nodes))

    def leftover_pids(self) -> dict[str, list[int]]:
        """Processes other than sshd still alive on any node (a clean run leaves none)."""
        return {n.name: n.pids() for n in self.nodes if n.pids()}

    def wait_no_leftovers(self, timeout: float = 10) -> dict[str, list[int]]:
        deadline = time.monotonic() + timeout
        while True:
            left = self.leftover_pids()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    # ---- bare nodes (password login, empty ~/.ssh) ------------------------------------------
    def _make_bare(self) -> None:
        done = _sh(["openssl", "passwd", "-6", "-stdin"], input=self.password + "\n")
        hashed = done.stdout.strip()
        # only root's entry: no other account's hash of this machine is copied anywhere
        root = next(ln for ln in Path("/etc/shadow").read_text().splitlines()
                    if ln.startswith("root:"))
        shadow = _with_root_field(root, 1, hashed)
        for node in self.nodes:
            fd = os.open(node.dir / "shadow", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(shadow)
            node.mounts += _own_home(node.dir, node.dot_ssh)
            node.mounts.append(f"mount --bind {node.dir / 'shadow'} /etc/shadow")
        _own_home(self.dir / "client", self.client_ssh)
        hosts = "".join(f"Host {n.name}\n  HostName {n.ip}\n  User root\n" for n in self.nodes)
        (self.client_ssh / "config").write_text(hosts)
        askpass = self.dir / "askpass"
        askpass.write_text(f"#!/bin/sh\nprintf '%s\\n' '{self.password}'\n")
        askpass.chmod(0o700)

    def _private_mounts(self, node: Node) -> list[str]:
        out = []
        for i, path in enumerate(self.private_files):
            copy = node.dir / f"private{i}-{Path(path).name}"
            shutil.copy2(path, copy)
            out.append(f"mount --bind {copy} {path}")
        return out

    def private_copy(self, node: Node, path: str) -> Path:
        """The node's own copy of a private file (what it sees at `path`)."""
        return node.dir / f"private{self.private_files.index(path)}-{Path(path).name}"

    @property
    def client_ssh(self) -> Path:
        """What client_argv() commands see as ~/.ssh."""
        return self.dir / "client" / "home" / ".ssh"

    def client_argv(self, argv: list[str]) -> list[str]:
        """argv run as the launching machine of a bare cluster: its own ~/.ssh, nothing else."""
        home = self.client_ssh.parent
        inner = " && ".join(_own_home(self.dir / "client", self.client_ssh)
                            + [f"export HOME={home}", 'exec "$@"'])
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh", *argv]

    def askpass_env(self) -> dict[str, str]:
        """ssh reads the password from this script, without a terminal (OpenSSH >= 8.4)."""
        return {"SSH_ASKPASS": str(self.dir / "askpass"), "SSH_ASKPASS_REQUIRE": "force",
                "DISPLAY": ":0"}


def _with_root_field(text: str, index: int, value: str) -> str:
    lines = []
    for line in text.splitlines():
        fields = line.split(":")
        if fields[0] == "root":
            fields[index] = value
        lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


def _own_home(work: Path, dot_ssh: Path) -> list[str]:
    """A passwd file in which root's home is dot_ssh's parent (made here, with an empty 700
    .ssh), and the shell step that binds it over /etc/passwd in a private mount namespace.
    OpenSSH (client and sshd) takes ~ from the passwd entry, not from $HOME."""
    dot_ssh.mkdir(mode=0o700, parents=True, exist_ok=True)
    passwd = work / "passwd"
    if not passwd.exists():
        passwd.write_text(_with_root_field(Path("/etc/passwd").read_text(), 5,
                                           str(dot_ssh.parent)))
    return [f"mount --bind {passwd} /etc/passwd"]


def _ssh_banner(ip: str) -> bool:
    import socket

    try:
        with socket.create_connection((ip, 22), timeout=2) as sock:
            return sock.recv(64).startswith(b"SSH-")
    except OSError:
        return False
