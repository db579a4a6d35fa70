"""The only place that runs ssh: argv building, error classification, parallel fan-out.

The system OpenSSH client is used so that ~/.ssh/config, keys, agents and jump hosts work as
they do for the user. BatchMode is always on: nothing ever waits on a password prompt.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass

from ddpkit.errors import UsageError
from ddpkit.i18n import N_, _
from ddpkit.launch.hosts import Host


@dataclass(frozen=True)
class SshOptions:
    config: str | None = None
    identity: str | None = None
    port: int | None = None
    options: tuple[str, ...] = ()  # KEY=VALUE, as ssh -o takes them
    connect_timeout: int = 10

    def __post_init__(self) -> None:
        for opt in self.options:
            if not re.match(r"^[A-Za-z][A-Za-z0-9]*=.+$", opt):
                raise UsageError(_("--ssh-option '{opt}' is not KEY=VALUE").format(opt=opt),
                                 _('e.g. --ssh-option ProxyJump=bastion'))
        if self.port is not None and not 1 <= self.port <= 65535:
            raise UsageError(_('--ssh-port {port} is not a TCP port').format(port=self.port), _('e.g. --ssh-port 2222'))


def ssh_base(host: Host, opts: SshOptions, *, batch: bool = True) -> list[str]:
    """ssh argv up to and including the destination. The user's -o come before our defaults
    because ssh keeps the first value it sees; BatchMode comes first so it cannot be undone.
    batch=False only for the one step of `ddpkit setup ssh` that installs a key: ssh may then
    ask for a password (on the terminal, or through SSH_ASKPASS)."""
    argv = ["ssh", "-o", "BatchMode=yes" if batch else "BatchMode=no"]
    if opts.config:
        argv += ["-F", opts.config]
    if opts.identity:
        argv += ["-i", opts.identity]
    if opts.port:
        argv += ["-p", str(opts.port)]
    for opt in opts.options:
        argv += ["-o", opt]
    argv += ["-o", f"ConnectTimeout={opts.connect_timeout}",
             # notice a dead node or a cut link within ~15 s instead of TCP's minutes
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
             "-T", host.target]
    return argv


def ssh_argv(host: Host, opts: SshOptions, remote_argv: list[str], *,
             batch: bool = True) -> list[str]:
    """ssh joins its arguments with spaces for the remote shell: quote every word once."""
    return ssh_base(host, opts, batch=batch) + ["--", shlex.join(remote_argv)]


def ssh_run(host: Host, opts: SshOptions, remote_argv: list[str], timeout: float, *,
            batch: bool = True, input: str | None = None) -> Reply:
    """One command on one host, waited for. With batch=False ssh keeps this terminal (no new
    session) so that it can ask for the password there."""
    argv = ssh_argv(host, opts, remote_argv, batch=batch)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, errors="replace",
                              timeout=timeout, start_new_session=batch, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Reply(host, None, "", _("no answer within {timeout:g}s").format(timeout=timeout))
    except OSError as exc:
        return Reply(host, 255, "", _("cannot run ssh: {error}").format(error=exc.strerror))
    return Reply(host, done.returncode, done.stdout, done.stderr)


def ssh_run_all(hosts: list[Host], opts: SshOptions, remote_argvs: list[list[str]],
                timeout: float) -> list[Reply]:
    """remote_argvs[i] on hosts[i], all at once (BatchMode)."""
    from concurrent.futures import ThreadPoolExecutor

    if not hosts:
        return []
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        return list(pool.map(lambda pair: ssh_run(pair[0], opts, pair[1], timeout),
                             zip(hosts, remote_argvs)))


def ssh_push(host: Host, opts: SshOptions, files: list[str], remote_dir: str,
             timeout: float) -> Reply:
    """Copy local files into remote_dir (created) as one tar stream over ssh's stdin: no scp,
    no second connection, works wherever a command does."""
    import tarfile
    import threading

    remote = ["sh", "-c", 'mkdir -p "$1" && tar -xf - -C "$1"', "sh", remote_dir]
    try:
        proc = subprocess.Popen(ssh_argv(host, opts, remote), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    except OSError as exc:
        return Reply(host, 255, "", _("cannot run ssh: {error}").format(error=exc.strerror))
    timer = threading.Timer(timeout, proc.kill)
    timer.daemon = True  # never keeps the interpreter alive
    timer.start()
    try:
        assert proc.stdin is not None
        with tarfile.open(fileobj=proc.stdin, mode="w|") as tar:
            for path in files:
                tar.add(path, arcname=path.rsplit("/", 1)[-1])
    except (BrokenPipeError, OSError, ValueError):
        pass  # ssh ended early (or was killed at the timeout): its stderr says why
    try:
        proc.stdin.close()
    except OSError:
        pass
    out = proc.stdout.read() if proc.stdout else b""  # tar -x says nothing unless it fails
    err = proc.stderr.read() if proc.stderr else b""
    proc.wait()
    timer.cancel()
    code = proc.returncode if proc.returncode >= 0 else None
    return Reply(host, code, out.decode(errors="replace"), err.decode(errors="replace"))


def ssh_settings(host: Host, opts: SshOptions) -> dict[str, str]:
    """What ssh would use for this host after ~/.ssh/config (`ssh -G`): hostname, port,
    userknownhostsfile, hostkeyalias, ... ({} when ssh cannot say)."""
    argv = ssh_base(host, opts)
    try:
        done = subprocess.run(argv[:-2] + ["-G", host.target], capture_output=True, text=True,
                              timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out: dict[str, str] = {}
    for line in done.stdout.splitlines():
        key, _unused, value = line.partition(" ")
        out.setdefault(key, value.strip())
    return out


@dataclass(frozen=True)
class SshFailure:
    kind: str  # auth | host_key | refused | timeout | unknown_host | no_route | closed | config | other
    message: str
    fix: str


_SSH_ERRORS: tuple[tuple[str, str, str, str], ...] = (
    # (kind, regex on ssh's stderr, message, fix); first match wins; translated where used
    ("host_key", r"REMOTE HOST IDENTIFICATION HAS CHANGED|Host key verification failed|"
                 r"No \w+ host key is known",
     N_("host key verification failed"),
     N_("ssh-keygen -R {name}, then 'ssh {target}' once and check the new fingerprint")),
    ("auth", r"Permission denied \(|Too many authentication failures|no mutual signature",
     N_("SSH key not accepted (password-less login is not set up)"),
     N_("ssh-copy-id {target} (keys must be in ~/.ssh/authorized_keys, ~/.ssh 700, "
        "authorized_keys 600 on {name})")),
    ("unknown_host", r"Could not resolve hostname|Name or service not known|"
                     r"nodename nor servname|Temporary failure in name resolution",
     N_("host name does not resolve"),
     N_("add '{name}' to /etc/hosts or a 'Host {name}' block with HostName to ~/.ssh/config")),
    ("refused", r"Connection refused",
     N_("connection refused: no sshd listening on that port"),
     N_("start sshd on {name} (sudo systemctl start sshd) or give the right --ssh-port")),
    ("timeout", r"timed out|Connection timeout",
     N_("connection timed out: host down, or a firewall drops SSH"),
     N_("check that {name} is up and that TCP 22 (or --ssh-port) is open in its firewall")),
    ("no_route", r"No route to host|Network is unreachable",
     N_("no route to host"),
     N_("check the address of {name} and the network between the nodes")),
    ("closed", r"Connection closed by|Connection reset by|kex_exchange_identification|"
               r"closed by remote host|Broken pipe",
     N_("the SSH connection was closed"),
     N_("check sshd on {name} (MaxStartups, TCP wrappers, 'journalctl -u sshd')")),
    ("config", r"Bad configuration option|Bad owner or permissions|no argument after keyword|"
               r"Can't open user config file|Identity file .* not accessible",
     N_("ssh configuration error"),
     N_("fix the ssh config or key file named above")),
)


def classify_ssh_error(stderr: str, host: Host) -> SshFailure:
    for kind, pattern, message, fix in _SSH_ERRORS:
        if re.search(pattern, stderr):
            return SshFailure(kind, _(message), _(fix).format(name=host.name,
                                                             target=host.target))
    last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "")
    return SshFailure("other", _("ssh failed: {last}").format(last=last) if last
                      else _("ssh failed (no message)"),
                      _("try 'ssh {target} true' by hand").format(target=host.target))


def describe_ssh_failure(stderr: str, host: Host) -> SshFailure:
    """The classified failure with ssh's own words appended, as every command reports it."""
    fail = classify_ssh_error(stderr, host)
    said = first_ssh_line(stderr)
    return SshFailure(fail.kind, f"{fail.message} ({said})" if said else fail.message, fail.fix)


def first_ssh_line(stderr: str) -> str:
    """The line of ssh's stderr that says what went wrong (not warnings about known_hosts)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if not ln.startswith(("Warning: Permanently added", "@@@")):
            return ln
    return lines[0] if lines else ""


@dataclass(frozen=True)
class Reply:
    host: Host
    returncode: int | None  # None: timed out locally
    stdout: str
    stderr: str


def ssh_hostname(host: Host, opts: SshOptions) -> str:
    """The address ssh would connect to for this host, after ~/.ssh/config (`ssh -G`)."""
    argv = ssh_base(host, opts)
    try:
        done = subprocess.run(argv[:-2] + ["-G", host.target], capture_output=True, text=True,
                              timeout=5, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return host.name
    for line in done.stdout.splitlines():
        key, _unused, value = line.partition(" ")
        if key == "hostname":
            return value.strip()
    return host.name


class LineSession:
    """A command on a host (or here) that we talk to in JSON lines over its stdin/stdout."""

    def __init__(self, host: Host, opts: SshOptions, remote_argv: list[str], local: bool) -> None:
        self.host = host
        argv = remote_argv if local else ssh_argv(host, opts, remote_argv)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, errors="replace",
                                     start_new_session=True)

    def send(self, obj: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def recv(self) -> dict | None:
        """The next JSON line; None when the command ended first (see stderr())."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue
        return None

    def stderr(self) -> str:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        return self.proc.stderr.read() if self.proc.stderr else ""

    def close(self, timeout: float = 5) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
