"""ssh argv and error classification (the texts are OpenSSH's own)."""

import shlex

import pytest

from ddpkit.errors import UsageError
from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions, classify_ssh_error, ssh_argv


def test_ssh_argv_batchmode_first_and_quoted():
    opts = SshOptions(config="/c", identity="/k", port=2222, options=("ProxyJump=bastion",))
    argv = ssh_argv(Host("node1", user="bob"), opts, ["python", "-c", "print('a b')"])
    assert argv[:3] == ["ssh", "-o", "BatchMode=yes"]
    assert argv.index("ProxyJump=bastion") < argv.index("ConnectTimeout=10")
    assert ["-F", "/c"] == argv[3:5] and "-i" in argv and "2222" in argv
    assert argv[-3:-1] == ["bob@node1", "--"]
    assert shlex.split(argv[-1]) == ["python", "-c", "print('a b')"]


@pytest.mark.parametrize("stderr, kind, fix", [
    ("root@10.0.0.2: Permission denied (publickey,password).", "auth", "ssh-copy-id"),
    ("@@@@@@@@\n@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @\nHost key verification failed.",
     "host_key", "ssh-keygen -R"),
    ("ssh: connect to host 10.0.0.2 port 22: Connection refused", "refused", "sshd"),
    ("ssh: connect to host 10.0.0.2 port 22: Connection timed out", "timeout", "firewall"),
    ("ssh: Could not resolve hostname nodex: Name or service not known", "unknown_host", "/etc/hosts"),
    ("ssh: connect to host 10.9.9.9 port 22: No route to host", "no_route", "network"),
    ("kex_exchange_identification: read: Connection reset by peer", "closed", "sshd"),
    ("something new", "other", "by hand"),
])
def test_classify(stderr, kind, fix):
    got = classify_ssh_error(stderr, Host("node1"))
    assert got.kind == kind and fix in got.fix


def test_bad_ssh_option():
    with pytest.raises(UsageError):
        SshOptions(options=("NoEquals",))
