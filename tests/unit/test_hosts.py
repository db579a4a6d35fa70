"""Host specs: -H, hostfiles, SLURM node lists. Table tests, including every error."""

import pytest

from ddpkit.errors import UsageError
from ddpkit.launch.hosts import (
    Host,
    expand_nodelist,
    expand_tasks_per_node,
    parse_host_list,
    parse_hostfile,
    resolve_hosts,
    slurm_hosts,
)


@pytest.mark.parametrize("spec, expect", [
    ("node0:4,node1:4", [Host("node0", 4), Host("node1", 4)]),
    ("node0,node1", [Host("node0"), Host("node1")]),
    ("alice@10.0.0.2:8", [Host("10.0.0.2", 8, "alice")]),
    ("gpu-01.cluster.local:2", [Host("gpu-01.cluster.local", 2)]),
    ("[fe80::1]:4,[fe80::2]", [Host("fe80::1", 4), Host("fe80::2")]),
    (" node0:1 , node1:2 ", [Host("node0", 1), Host("node1", 2)]),
])
def test_host_list(spec, expect):
    assert parse_host_list(spec) == expect


@pytest.mark.parametrize("spec, words", [
    ("", "empty host list"),
    ("node0,,node1", "empty entry"),
    ("node0:0", "0 slots"),
    ("node0:x", "must be a positive integer"),
    ("node0:-1", "must be a positive integer"),
    ("node0:4,node0:2", "listed twice"),
    ("@node0", "empty user"),
    ("no de", "not a host name"),
    ("[fe80::1", "unclosed"),
])
def test_host_list_errors(spec, words):
    with pytest.raises(UsageError) as exc:
        parse_host_list(spec)
    assert words in exc.value.message and exc.value.hint


HOSTFILE = """# DeepSpeed / MPI style
node0 slots=4
node1 slots=4   # trailing comment

worker-2:2
worker-3
"""


def test_hostfile_mixed_formats():
    assert parse_hostfile(HOSTFILE) == [Host("node0", 4), Host("node1", 4), Host("worker-2", 2),
                                        Host("worker-3")]


@pytest.mark.parametrize("text, words", [
    ("node0 slots=0\n", "0 slots"),
    ("node0 slots=four\n", "positive integer"),
    ("node0 gpus=4\n", "cannot read 'gpus=4'"),
    ("node0 slots=2 slots=4\n", "slots given twice"),
    ("# only comments\n\n", "no hosts"),
    ("a slots=1\nb slots=1\na slots=2\n", "listed twice"),
])
def test_hostfile_errors_name_the_line(text, words):
    with pytest.raises(UsageError) as exc:
        parse_hostfile(text, "hosts.txt")
    assert words in exc.value.message
    assert exc.value.message.startswith("hosts.txt")


@pytest.mark.parametrize("spec, names", [
    ("gpu[01-04,07]", ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]),
    ("node1,node2", ["node1", "node2"]),
    ("a[1-2],b[08-10]", ["a1", "a2", "b08", "b09", "b10"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("single", ["single"]),
])
def test_slurm_nodelist(spec, names):
    assert expand_nodelist(spec) == names


@pytest.mark.parametrize("spec, count, expect", [
    ("4", 3, [4, 4, 4]), ("2(x3),1", 4, [2, 2, 2, 1]), ("8,4", 2, [8, 4])])
def test_slurm_tasks_per_node(spec, count, expect):
    assert expand_tasks_per_node(spec, count) == expect


def test_slurm_detected_from_environment():
    env = {"SLURM_JOB_NODELIST": "gpu[1-2]", "SLURM_NTASKS_PER_NODE": "4"}
    hosts, where = resolve_hosts(None, None, env)
    assert where == "SLURM" and hosts == [Host("gpu1", 4), Host("gpu2", 4)]


def test_explicit_hosts_win_over_slurm():
    hosts, where = resolve_hosts("a:1", None, {"SLURM_JOB_NODELIST": "gpu[1-2]"})
    assert where == "-H" and hosts == [Host("a", 1)]


def test_no_hosts_means_this_machine():
    assert resolve_hosts(None, None, {}) == ([Host("localhost")], "local")


def test_slurm_bad_counts():
    with pytest.raises(UsageError):
        slurm_hosts({"SLURM_JOB_NODELIST": "a[1-3]", "SLURM_NTASKS_PER_NODE": "2,2"})


def test_missing_hostfile_is_usage_error(tmp_path):
    with pytest.raises(UsageError) as exc:
        resolve_hosts(None, str(tmp_path / "nope"), {})
    assert "--hostfile" in exc.value.message


def test_both_flags_is_usage_error():
    with pytest.raises(UsageError):
        resolve_hosts("a", "f", {})


@pytest.mark.parametrize("spec", ["-oProxyCommand=touch /tmp/pwn@node0:2", "-node0",
                                  "a;b@node0", "[]:2", "[not;ipv6]:1"])
def test_specs_that_ssh_would_read_as_options_are_rejected(spec):
    with pytest.raises(UsageError):
        parse_host_list(spec)
