"""`ddpkit setup ssh`: password-less SSH from this machine to every node (and, with all_pairs,
between the nodes), safe to run again.

Steps: a key here (ed25519, created only when there is none); on every node the key in
~/.ssh/authorized_keys with ~/.ssh 700 and the file 600, done by one idempotent shell script
that prints what it changed. A node that does not accept the key yet gets the same script
through the one ssh call that may ask for a password. Host keys are recorded on first use
(accept-new) and shown; a changed host key is an error, never replaced. BatchMode login is
proved at the end. Everything runs through the system ssh, so ~/.ssh/config applies.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from ddpkit.errors import EnvironmentFailure
from ddpkit.i18n import _
from ddpkit.launch.hosts import Host
from ddpkit.launch.proc import run_cmd
from ddpkit.launch.remote import (
    Reply,
    SshOptions,
    describe_ssh_failure,
    ssh_run,
    ssh_run_all,
    ssh_settings,
)

# Idempotent: prints one "changed: ..." line per thing it changed, nothing when all was right.
# $@ are the public keys to authorize. umask 077 so nothing is ever created group-readable.
AUTHORIZE_SCRIPT = r"""umask 077
d="$HOME/.ssh"; f="$d/authorized_keys"
[ -d "$d" ] || { mkdir -p "$d" && echo "changed: created ~/.ssh"; }
[ "$(stat -c %a "$d")" = 700 ] || { chmod 700 "$d" && echo "changed: chmod 700 ~/.ssh"; }
[ -f "$f" ] || { : > "$f" && echo "changed: created ~/.ssh/authorized_keys"; }
[ "$(stat -c %a "$f")" = 600 ] || { chmod 600 "$f" && echo "changed: chmod 600 ~/.ssh/authorized_keys"; }
for k in "$@"; do
  grep -qxF "$k" "$f" && continue
  [ -s "$f" ] && [ -n "$(tail -c1 "$f")" ] && echo >> "$f"
  printf '%s\n' "$k" >> "$f" && echo "changed: added key ${k##* }"
done
"""

# A node's own key for --all-pairs: created when missing, then printed.
NODE_KEY_SCRIPT = r"""umask 077
k="$HOME/.ssh/id_ed25519"
[ -f "$k" ] || { mkdir -p "$HOME/.ssh" && ssh-keygen -q -t ed25519 -N "" -C "ddpkit@$(hostname)" -f "$k" \
  && echo "changed: created the node's key ~/.ssh/id_ed25519"; }
echo "pubkey: $(cat "$k.pub")"
"""

# From a node to each other node ($@): BatchMode, host keys recorded on first use.
PAIRS_SCRIPT = r"""for h in "$@"; do
  err=$(ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o ConnectTimeout=5 -T "$h" true 2>&1 </dev/null)
  rc=$?
  echo "pair: $h $rc $(printf '%s' "$err" | tr '\n' ' ')"
done
"""

DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")


@dataclass(frozen=True)
class HostResult:
    host: str
    state: str  # ok | failed
    changes: tuple[str, ...] = ()
    fingerprint: str = ""
    message: str = ""
    fix: str = ""
    password_used: bool = False

    def to_dict(self) -> dict:
        return {"host": self.host, "state": self.state, "changes": list(self.changes),
                "fingerprint": self.fingerprint, "message": self.message, "fix": self.fix,
                "password_used": self.password_used}


@dataclass(frozen=True)
class PairResult:
    src: str
    dst: str
    ok: bool
    error: str = ""

    def to_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "ok": self.ok, "error": self.error}


@dataclass(frozen=True)
class SshSetupReport:
    key: str
    local_changes: tuple[str, ...]
    hosts: tuple[HostResult, ...]
    pairs: tuple[PairResult, ...] = ()

    @property
    def ok(self) -> bool:
        return all(h.state == "ok" for h in self.hosts) and all(p.ok for p in self.pairs)

    @property
    def changed(self) -> bool:
        return bool(self.local_changes) or any(h.changes for h in self.hosts)

    def to_dict(self) -> dict:
        return {"schema": 1, "status": "ok" if self.ok else "fail", "changed": self.changed,
                "key": self.key, "local_changes": list(self.local_changes),
                "hosts": [h.to_dict() for h in self.hosts],
                "pairs": [p.to_dict() for p in self.pairs]}


# ---- pure -----------------------------------------------------------------------------------

def authorize_argv(pubkeys: list[str]) -> list[str]:
    return ["sh", "-c", AUTHORIZE_SCRIPT, "ddpkit-setup-ssh", *pubkeys]


def changes_in(stdout: str) -> list[str]:
    return [ln.split("changed: ", 1)[1].strip() for ln in stdout.splitlines()
            if ln.startswith("changed: ")]


def known_hosts_name(settings: dict[str, str], fallback: str) -> str:
    """The name ssh files the host key under: HostKeyAlias, else HostName; [name]:port
    when the port is not 22."""
    name = settings.get("hostkeyalias") or settings.get("hostname") or fallback
    port = settings.get("port", "22")
    return name if port in ("", "22") else f"[{name}]:{port}"


def known_hosts_files(settings: dict[str, str]) -> list[str]:
    files = settings.get("userknownhostsfile", "~/.ssh/known_hosts").split()
    return [os.path.expanduser(f) for f in files]


_FINGERPRINT = re.compile(r"^\S+\s+(\S+)\s+(SHA256:\S+)", re.M)


def parse_fingerprints(keygen_out: str) -> list[str]:
    """`ssh-keygen -l -F NAME -f FILE` -> ["ED25519 SHA256:...", ...]."""
    return [f"{kind} {fp}" for kind, fp in _FINGERPRINT.findall(keygen_out)]


def host_key_fix(name: str, files: list[str]) -> str:
    where = f" -f {files[0]}" if files and files[0] != os.path.expanduser("~/.ssh/known_hosts") \
        else ""
    return _("if the host was reinstalled: {command}, then run this again and compare the "
             "fingerprint it shows with the node's own ({check} on the node); otherwise do not "
             "connect: someone may be in the middle").format(
                 command=f"ssh-keygen -R '{name}'{where}",
                 check="ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub")


def parse_pairs(src: str, stdout: str) -> list[tuple[PairResult, bool]]:
    """PAIRS_SCRIPT's lines -> (result, whether that login recorded a new host key)."""
    out = []
    for line in stdout.splitlines():
        if not line.startswith("pair: "):
            continue
        parts = line[len("pair: "):].split(" ", 2)
        if len(parts) < 2:
            continue
        said = parts[2].strip() if len(parts) > 2 else ""
        ok = parts[1] == "0"
        out.append((PairResult(src, parts[0], ok, "" if ok else said or f"exit {parts[1]}"),
                    ok and "Permanently added" in said))
    return out


# ---- acting ---------------------------------------------------------------------------------

def ensure_key(identity: str | None, log: Callable[[str], None]) -> tuple[Path, list[str]]:
    """The key to install (created when there is none) and what was changed here."""
    ssh_dir = Path(os.path.expanduser("~/.ssh"))
    changes = []
    if identity:
        key = Path(os.path.expanduser(identity))
    else:
        key = next((ssh_dir / k for k in DEFAULT_KEYS if (ssh_dir / k).is_file()),
                   ssh_dir / "id_ed25519")
    if not ssh_dir.is_dir():
        ssh_dir.mkdir(mode=0o700, parents=True)
        changes.append(f"created {ssh_dir}")
    if not key.is_file():
        comment = f"{getpass.getuser()}@{socket.gethostname()}"
        done = run_cmd(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                        "-f", str(key)], timeout=30)
        if not done.ok:
            raise EnvironmentFailure(_('cannot create an SSH key at {key}: {strip}').format(key=key, strip=(done.stderr or done.error).strip()),
                                     _('install the OpenSSH client (apt-get install openssh-client / dnf install openssh-clients)'))
        changes.append(f"created the key {key} (ed25519)")
        log(_('ddpkit setup ssh: created {key}').format(key=key))
    pub = Path(str(key) + ".pub")
    if not pub.is_file():
        done = run_cmd(["ssh-keygen", "-y", "-f", str(key)], timeout=10)
        if not done.ok:
            raise EnvironmentFailure(_('{pub} is missing and cannot be derived from {key}').format(pub=pub, key=key),
                                     _('ssh-keygen -y -f {key} > {pub} (asks the passphrase)').format(key=key, pub=pub))
        pub.write_text(done.stdout)
        changes.append(f"wrote {pub}")
    changes += _fix_modes(ssh_dir, key)
    return key, changes


def _fix_modes(ssh_dir: Path, key: Path) -> list[str]:
    changes = []
    for path, mode in ((ssh_dir, 0o700), (key, 0o600), (ssh_dir / "authorized_keys", 0o600)):
        if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(mode)
            changes.append(f"chmod {mode:o} {path}")
    return changes


def _fingerprint(host: Host, opts: SshOptions) -> tuple[str, str, list[str]]:
    settings = ssh_settings(host, opts)
    name = known_hosts_name(settings, host.name)
    files = known_hosts_files(settings)
    for f in files:
        done = run_cmd(["ssh-keygen", "-l", "-F", name, "-f", f], timeout=10)
        found = parse_fingerprints(done.stdout)
        if found:
            return ", ".join(found), name, files
    return "", name, files


def _failed(host: Host, reply: Reply, opts: SshOptions, what: str) -> HostResult:
    fail = describe_ssh_failure(reply.stderr, host)
    fix = fail.fix
    if fail.kind == "host_key":
        _unused, name, files = _fingerprint(host, opts)
        fix = host_key_fix(name, files)
        return HostResult(host.name, "failed", message=_(
            "{what}: the host key of {name} has CHANGED since it was recorded ({message})").format(
                what=what, name=name, message=fail.message), fix=fix)
    if reply.returncode is None:
        return HostResult(host.name, "failed", message=f"{what}: {reply.stderr}",
                          fix=_("check that {host} is up").format(host=host.name))
    if reply.returncode != 255:
        last = (reply.stderr.strip().splitlines() or [f"exit {reply.returncode}"])[-1]
        return HostResult(host.name, "failed", message=f"{what}: {last}",
                          fix=_("run 'ssh {target}' by hand and look at ~/.ssh there").format(
                              target=host.target))
    return HostResult(host.name, "failed", message=f"{what}: {fail.message}", fix=fix)


def setup_ssh(hosts: list[Host], ssh: SshOptions, *, all_pairs: bool = False,
              log: Callable[[str], None] = print, password_timeout: float = 300) -> SshSetupReport:
    key, local_changes = ensure_key(ssh.identity, log)
    pubkey = Path(str(key) + ".pub").read_text().strip()
    # accept-new after the user's own -o (ssh keeps the first value): a first contact records
    # the host key, a changed one still fails
    opts = replace(ssh, identity=str(key),
                   options=ssh.options + ("StrictHostKeyChecking=accept-new",))
    timeout = ssh.connect_timeout + 20
    first = ssh_run_all(hosts, opts, [authorize_argv([pubkey])] * len(hosts), timeout)
    results: list[HostResult | None] = [None] * len(hosts)
    for i, (host, reply) in enumerate(zip(hosts, first)):
        if reply.returncode == 0:
            results[i] = HostResult(host.name, "ok", tuple(changes_in(reply.stdout)))
        elif reply.returncode == 255 and describe_ssh_failure(reply.stderr, host).kind == "auth":
            # the one step that may prompt: one host at a time, the prompt names it
            log(_("ddpkit setup ssh: {name} does not accept the key yet; installing it (ssh asks for {target}'s password once)").format(name=host.name, target=host.target))
            again = ssh_run(host, opts, authorize_argv([pubkey]), password_timeout, batch=False)
            if again.returncode == 0:
                results[i] = HostResult(host.name, "ok", tuple(changes_in(again.stdout)),
                                        password_used=True)
            else:
                results[i] = _failed(host, again, opts, _("installing the key failed"))
        else:
            results[i] = _failed(host, reply, opts, _("cannot log in"))
    proved = _prove(hosts, opts, results, timeout)
    out = []
    for host, res, said in zip(hosts, proved, first):
        fp = _fingerprint(host, opts)[0] if res.state == "ok" else ""
        changes = list(res.changes)
        if "Permanently added" in said.stderr:
            changes.insert(0, _("recorded the host key (first contact)"))
        out.append(replace(res, fingerprint=fp, changes=tuple(changes)))
    pairs: list[PairResult] = []
    if all_pairs and all(r.state == "ok" for r in out):
        out, pairs = _all_pairs(hosts, opts, out, timeout)
    return SshSetupReport(str(key), tuple(local_changes), tuple(out), tuple(pairs))


def _prove(hosts: list[Host], opts: SshOptions, results: list[HostResult | None],
           timeout: float) -> list[HostResult]:
    """BatchMode login, as every other ddpkit command will do it."""
    todo = [i for i, r in enumerate(results) if r is not None and r.state == "ok"]
    replies = ssh_run_all([hosts[i] for i in todo], opts, [["true"]] * len(todo), timeout)
    out = [r for r in results if r is not None]
    for i, reply in zip(todo, replies):
        if reply.returncode != 0:
            res = _failed(hosts[i], reply, opts,
                          _("the key is installed but BatchMode login fails"))
            if res.fix.startswith("ssh-copy-id"):
                res = replace(res, fix=_("on {host}: check sshd's PubkeyAuthentication and "
                                         "AuthorizedKeysFile (sshd -T), and that the home "
                                         "directory is not group- or world-writable").format(
                                             host=hosts[i].name))
            out[i] = res
    return out


def _all_pairs(hosts: list[Host], opts: SshOptions, results: list[HostResult],
               timeout: float) -> tuple[list[HostResult], list[PairResult]]:
    """Every node gets a key of its own, every node authorizes all of them, then every node
    logs in to every other by the name given in -H (as mpirun and horovodrun will)."""
    made = ssh_run_all(hosts, opts, [["sh", "-c", NODE_KEY_SCRIPT]] * len(hosts), timeout)
    keys, extra = [], [list(r.changes) for r in results]
    for i, reply in enumerate(made):
        found = [ln.split("pubkey: ", 1)[1].strip() for ln in reply.stdout.splitlines()
                 if ln.startswith("pubkey: ")]
        if reply.returncode != 0 or not found or not found[0]:
            results[i] = _failed(hosts[i], reply, opts, _("cannot create the node's own key"))
            continue
        keys.append(found[0])
        extra[i] += changes_in(reply.stdout)
    done = ssh_run_all(hosts, opts, [authorize_argv(keys)] * len(hosts), timeout)
    for i, reply in enumerate(done):
        extra[i] += [_("{change} (another node's)").format(change=c) if c.startswith("added key")
                     else c
                     for c in changes_in(reply.stdout)]
    names = [h.target for h in hosts]
    argvs = [["sh", "-c", PAIRS_SCRIPT, "ddpkit-pairs", *[n for j, n in enumerate(names) if j != i]]
             for i in range(len(hosts))]
    tried = ssh_run_all(hosts, opts, argvs, timeout + 10 * len(hosts))
    pairs = []
    for i, reply in enumerate(tried):
        found = parse_pairs(hosts[i].name, reply.stdout)
        if reply.returncode != 0 and not found:
            results[i] = _failed(hosts[i], reply, opts, _("cannot test logins from this node"))
        pairs += [p for p, _unused in found]
        recorded = [p.dst for p, new_key in found if new_key]
        if recorded:
            extra[i].append(_("recorded the host keys of {hosts}").format(hosts=", ".join(recorded)))
    out = [replace(r, changes=tuple(c)) if r.state == "ok" else r for r, c in zip(results, extra)]
    return out, pairs
