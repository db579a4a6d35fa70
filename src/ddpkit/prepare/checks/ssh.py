"""The SSH client and keys that multi-node launches need (the seeds' troubleshooting list)."""

from __future__ import annotations

from ddpkit.i18n import _
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status
from ddpkit.prepare.checks.util import install_cmd


def ssh_client(s: Snapshot) -> CheckResult:
    if not s.ssh.client:
        return CheckResult("ssh.client", Status.WARN, _('no ssh client: cannot start other nodes from here'),
                           hint=install_cmd(s.os, "openssh-clients", "openssh-client"))
    return CheckResult("ssh.client", Status.OK, _('ssh client {client}').format(client=s.ssh.client))


def ssh_keys(s: Snapshot) -> CheckResult:
    if not s.ssh.private_keys:
        return CheckResult(
            "ssh.keys", Status.WARN, _('no SSH key pair in ~/.ssh'),
            detail=_('password-less SSH to every node is needed to launch from one command'),
            hint=_("ssh-keygen -t ed25519 -N '' -f ~/.ssh/id_ed25519 && ssh-copy-id USER@NODE (each node)"))
    return CheckResult("ssh.keys", Status.OK, _('key pair: {private_keys}').format(private_keys=", ".join(s.ssh.private_keys)))


def ssh_perms(s: Snapshot) -> CheckResult:
    problems, fixes = [], []
    if s.ssh.dir_mode is not None and s.ssh.dir_mode != 0o700:
        problems.append(_("~/.ssh is {mode:o}").format(mode=s.ssh.dir_mode))
        fixes.append("chmod 700 ~/.ssh")
    if s.ssh.authorized_keys_mode is not None and s.ssh.authorized_keys_mode != 0o600:
        problems.append(_("authorized_keys is {mode:o}").format(
            mode=s.ssh.authorized_keys_mode))
        fixes.append("chmod 600 ~/.ssh/authorized_keys")
    if s.ssh.dir_mode is None:
        return CheckResult("ssh.perms", Status.SKIP, _('no ~/.ssh directory'))
    if not problems:
        return CheckResult("ssh.perms", Status.OK, _('~/.ssh 700, authorized_keys 600 or absent'))
    writable = any(m is not None and m & 0o022 for m in (s.ssh.dir_mode, s.ssh.authorized_keys_mode))
    return CheckResult(
        "ssh.perms", Status.FAIL if writable else Status.WARN, "; ".join(problems),
        detail=_('sshd ignores keys in a directory or file others can write (StrictModes)')
        if writable else _("the guides' recommended modes are 700 and 600"),
        hint=" && ".join(fixes))


def companions(s: Snapshot) -> CheckResult:
    if not s.companions:
        return CheckResult("companions.installed", Status.OK, _('no horovod, accelerate or deepspeed'),
                           detail="informational")
    listing = ", ".join(f"{k} {v}" for k, v in sorted(s.companions.items()))
    return CheckResult("companions.installed", Status.OK, listing, detail="informational")
