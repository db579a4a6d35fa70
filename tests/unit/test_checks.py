"""The doctor's checks are pure functions of a Snapshot: judged here with tables."""

from dataclasses import replace

import pytest

from ddpkit.parsers.nvsmi import GpuInfo, SmiReport
from ddpkit.parsers.osrelease import OsInfo
from ddpkit.prepare.checks import Status, evaluate
from ddpkit.prepare.checks.base import Iface, Snapshot, SshFacts, TorchFacts
from ddpkit.prepare.checks.envvars import ifname_matches, judge_name
from ddpkit.prepare.checks.gpu import gpu_torch_cuda, gpu_visible, wheel_for_driver_cuda
from ddpkit.prepare.checks.network import net_hostname, net_interfaces, port_firewall
from ddpkit.prepare.checks.system import sys_shm

BASE = Snapshot(
    hostname="node0", hostname_addrs=("10.0.0.5",), python_version="3.11.7",
    python_executable="/venv/bin/python", in_venv=True,
    os=OsInfo(id="rocky", version_id="9.3", family="rhel"),
    torch=TorchFacts(installed=True, version="2.13.0+cu128", cuda="12.8", nccl="2.27.3",
                     backends={"gloo": True, "nccl": True, "mpi": False}),
    interfaces=(Iface("lo", ("127.0.0.1/8",)), Iface("eth0", ("10.0.0.5/24",))),
    shm_bytes=16 * 2**30, nofile=(65536, 65536), memlock=(-1, -1), cpu_count=32,
    ssh=SshFacts(client="/usr/bin/ssh", dir_mode=0o700, authorized_keys_mode=0o600,
                 private_keys=("id_ed25519",)),
)
A100 = SmiReport("570.124.06", "12.8", tuple(
    GpuInfo(i, "NVIDIA A100-SXM4-80GB", 81920, f"GPU-{i}aaa-bbbb") for i in range(4)))


def by_id(snapshot):
    return {r.id: r for r in evaluate(snapshot)}


def test_healthy_gpu_node_has_no_failures():
    results = by_id(replace(BASE, gpu=A100, gpu_source="nvidia-smi"))
    assert [r.id for r in results.values() if r.status == Status.FAIL] == []
    assert "4 x NVIDIA A100-SXM4-80GB" in results["gpu.driver"].summary


def test_no_gpu_is_a_valid_cpu_setup():
    r = by_id(replace(BASE, gpu=None, gpu_error="nvidia-smi not found"))["gpu.driver"]
    assert r.status == Status.OK and "Gloo" in r.summary


def test_driver_not_answering_fails():
    r = by_id(replace(BASE, gpu=None, gpu_error="NVIDIA-SMI has failed because it couldn't "
                      "communicate with the NVIDIA driver"))["gpu.driver"]
    assert r.status == Status.FAIL and "modprobe nvidia" in r.hint


def test_cpu_torch_on_gpu_machine_fails_with_wheel_hint():
    s = replace(BASE, gpu=A100, torch=TorchFacts(installed=True, version="2.13.0+cpu",
                                                  backends={"gloo": True}))
    r = gpu_torch_cuda(s)
    assert r.status == Status.FAIL and "whl/cu128" in r.hint


@pytest.mark.parametrize("driver, cuda, status", [
    ("570.124.06", "12.8", Status.OK),
    ("535.104.05", "12.8", Status.OK),   # minor-version compatibility within CUDA 12
    ("470.57.02", "12.8", Status.FAIL),  # CUDA 12 needs >= 525.60.13
    ("470.57.02", "11.8", Status.OK),
    ("440.33.01", "11.8", Status.FAIL),
])
def test_driver_vs_torch_cuda(driver, cuda, status):
    s = replace(BASE, gpu=replace(A100, driver_version=driver),
                torch=replace(BASE.torch, cuda=cuda))
    assert gpu_torch_cuda(s).status == status


@pytest.mark.parametrize("driver_cuda, wheel", [
    ("12.2", "cu121"), ("12.8", "cu128"), ("13.0", "cu130"), ("11.4", "cu118"), ("12.4", "cu124")])
def test_wheel_for_driver(driver_cuda, wheel):
    assert wheel_for_driver_cuda(driver_cuda) == wheel


@pytest.mark.parametrize("cvd, status, words", [
    (None, Status.OK, "all 4"),
    ("0,1", Status.OK, "2 of 4"),
    ("0,7", Status.FAIL, "'7'"),
    ("1,1", Status.FAIL, "twice"),
    ("", Status.WARN, "no GPU"),
    ("GPU-2aaa", Status.OK, "1 of 4"),
    ("GPU-ffff", Status.FAIL, "not a GPU"),
])
def test_cuda_visible_devices(cvd, status, words):
    env = {} if cvd is None else {"CUDA_VISIBLE_DEVICES": cvd}
    r = gpu_visible(replace(BASE, gpu=A100, env=env))
    assert r.status == status and words in r.summary


def test_hostname_on_loopback_warns_with_fix():
    r = net_hostname(replace(BASE, hostname_addrs=("127.0.1.1",)))
    assert r.status == Status.WARN and "127.0.1.1" in r.summary
    assert "GLOO_SOCKET_IFNAME=eth0" in r.hint and "10.0.0.5 node0" in r.hint


def test_virtual_interfaces_warn_when_ifname_unset():
    s = replace(BASE, interfaces=BASE.interfaces + (Iface("virbr0", ("192.168.122.1/24",)),))
    assert net_interfaces(s).status == Status.WARN
    pinned = replace(s, env={"NCCL_SOCKET_IFNAME": "eth0"})
    assert net_interfaces(pinned).status == Status.OK


def test_only_loopback_fails():
    assert net_interfaces(replace(BASE, interfaces=(Iface("lo", ("127.0.0.1/8",)),))).status == Status.FAIL


def test_firewall_block_fails_with_firewalld_hint():
    listing = "public (active)\n  target: default\n  ports: \n  services: ssh\n"
    s = replace(BASE, firewall={"firewalld_state": "running", "firewalld_list": listing})
    r = port_firewall(s)
    assert r.status == Status.FAIL
    assert "firewall-cmd --permanent --add-port=29500/tcp" in r.hint
    assert "--add-source=10.0.0.0/24" in r.hint


def test_firewall_unreadable_is_skipped_with_sudo_hint():
    r = port_firewall(replace(BASE, firewall={}, firewall_unreadable="iptables -S: Permission denied"))
    assert r.status == Status.SKIP and "sudo" in r.hint


@pytest.mark.parametrize("size, status", [(None, Status.FAIL), (64 * 2**20, Status.FAIL),
                                          (512 * 2**20, Status.WARN), (8 * 2**30, Status.OK)])
def test_shm(size, status):
    assert sys_shm(replace(BASE, shm_bytes=size)).status == status


@pytest.mark.parametrize("name, status, words", [
    ("NCCL_SOCKET_TIMEOUT", Status.WARN, "init_process_group(timeout"),
    ("NCCL_BLOCKING_WAIT", Status.WARN, "TORCH_NCCL_BLOCKING_WAIT"),
    ("NCCL_ASYNC_ERROR_HANDLING", Status.WARN, "TORCH_NCCL_ASYNC_ERROR_HANDLING"),
    ("NCCL_SOCKET_IFNAM", Status.WARN, "NCCL_SOCKET_IFNAME"),
    ("NCCL_LL_THRESHOLD", Status.WARN, "removed"),
    ("TORCH_NCCL_BLOCKING_WAIT", None, ""),
    ("NCCL_DEBUG", None, ""),
    ("NCCL_IB_HCA", None, ""),
    # set on purpose by NVIDIA's CUDA images and by builds against a system NCCL (the H200's
    # NGC-style image had NCCL_VERSION: the doctor warned "did you mean NCCL_IBVERBS_LIB?")
    ("NCCL_VERSION", None, ""),
    ("NCCL_HOME", None, ""),
    ("NCCL_LIB_DIR", None, ""),
    ("NCCL_TESTS_DIR", None, ""),
    # a name like no real one: no far-fetched "did you mean" (compared without NCCL_)
    ("NCCL_MY_SETTING", Status.WARN, "unset NCCL_MY_SETTING"),
    ("NCCL_IB_DISABEL", Status.WARN, "did you mean NCCL_IB_DISABLE?"),
    ("TORCH_NCCL_BLOCKING_WAI", Status.WARN, "did you mean TORCH_NCCL_BLOCKING_WAIT?"),
])
def test_env_names(name, status, words):
    r = judge_name(name)
    if status is None:
        assert r is None
    else:
        text = f"{r.summary} {r.detail} {r.hint}"
        assert r.status == status and words in text


@pytest.mark.parametrize("spec, names, expect", [
    ("eth", ["lo", "eth0", "eth1", "ib0"], ["eth0", "eth1"]),
    ("^docker,lo", ["lo", "docker0", "eth0"], ["eth0"]),
    ("=eth0", ["eth0", "eth01"], ["eth0"]),
    ("ens5f0", ["eth0"], []),
])
def test_ifname_matches(spec, names, expect):
    assert ifname_matches(spec, names) == expect


def test_missing_ifname_fails():
    results = by_id(replace(BASE, env={"NCCL_SOCKET_IFNAME": "ens5f0", "GLOO_SOCKET_IFNAME": "ib9"}))
    assert results["env.NCCL_SOCKET_IFNAME"].status == Status.FAIL
    assert results["env.GLOO_SOCKET_IFNAME"].status == Status.FAIL


def test_world_writable_ssh_dir_fails():
    r = by_id(replace(BASE, ssh=replace(BASE.ssh, dir_mode=0o777)))["ssh.perms"]
    assert r.status == Status.FAIL and "chmod 700 ~/.ssh" in r.hint


def test_a_crashing_check_is_reported_not_raised(monkeypatch):
    import ddpkit.prepare.checks as checks

    def boom(s):
        raise ValueError("bad data")

    monkeypatch.setattr(checks, "CHECKS", (("gpu", boom),))
    (r,) = evaluate(BASE)
    assert r.status == Status.SKIP and "bad data" in r.summary


def test_plugin_nccl_names_are_not_called_unknown():
    """NCCL_OFI_*/NCCL_TCPX_* are read by network plugins: the doctor must not flag them."""
    assert judge_name("NCCL_OFI_USE_GDRCOPY") is None
    assert judge_name("NCCL_SOCKET_TIMEOUT") is not None
