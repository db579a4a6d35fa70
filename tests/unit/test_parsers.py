"""Parsers against recorded real outputs (tests/fixtures, sources in tests/fixtures/SOURCES.md)."""

import pytest

from ddpkit.parsers.firewall import BLOCKED, OPEN, firewalld_verdict, iptables_verdict, ufw_verdict
from ddpkit.parsers.nvsmi import parse_smi_query, parse_smi_table
from ddpkit.parsers.osrelease import parse_os_release
from tests.conftest import FIXTURES

GPU = FIXTURES / "gpu"
FW = FIXTURES / "firewall"


@pytest.mark.parametrize("name, driver, cuda, count, model, mem", [
    ("smi-q-535.129.03.txt", "535.129.03", "12.2", 8, "NVIDIA A100-SXM4-40GB", 40960),
    ("smi-q-535.183.01.txt", "535.183.01", "12.2", 8, "NVIDIA H100 80GB HBM3", 81559),
    ("smi-q-560.35.03.txt", "560.35.03", "12.6", 1, "NVIDIA TITAN V", 12288),
    ("smi-q-580.159.04.txt", "580.159.04", "13.0", 1, "NVIDIA H200", 143771),  # gpu-check.sh
    ("smi-q-590.48.01.txt", "590.48.01", "13.1", 1, "NVIDIA H200", 143771),
    ("smi-q-590.48.01-mig.txt", "590.48.01", "13.1", 1, "NVIDIA H100 80GB HBM3", 81559),
    ("smi-q-610.57.04.txt", "610.57.04", "13.3", 1, "NVIDIA GeForce RTX 2080 SUPER", 8192),
])
def test_smi_query(name, driver, cuda, count, model, mem):
    r = parse_smi_query((GPU / name).read_text())
    assert (r.driver_version, r.cuda_version, len(r.gpus)) == (driver, cuda, count)
    assert r.gpus[0].name == model and r.gpus[0].memory_total_mib == mem
    assert r.gpus[0].uuid.startswith("GPU-") and r.gpus[-1].index == count - 1


def test_smi_query_uuids_are_per_gpu():
    r = parse_smi_query((GPU / "smi-q-535.129.03.txt").read_text())
    assert len({g.uuid for g in r.gpus}) == 8
    assert r.gpus[0].bus_id == "00000000:2F:00.0"


@pytest.mark.parametrize("name, driver, cuda, count, model, mem", [
    ("smi-table-440.82.txt", "440.82", "10.2", 2, "GeForce GTX 108...", 11175),
    ("smi-table-525.125.06.txt", "525.125.06", "12.0", 1, "NVIDIA GeForce ...", 23028),
    ("smi-table-550.90.07.txt", "550.90.07", "12.4", 8, "NVIDIA H100 80GB HBM3", 81559),
    ("smi-table-580.159.04.txt", "580.159.04", "13.0", 1, "NVIDIA H200", 143771),  # gpu-check.sh
    ("smi-table-590.48.01.txt", "590.48.01", "13.1", 1, "NVIDIA H200", 143771),
    ("smi-table-610.57.04.txt", "610.57.04", "13.3", 1, "NVIDIA GeForce RTX 2080 ...", 8192),
])
def test_smi_table(name, driver, cuda, count, model, mem):
    r = parse_smi_table((GPU / name).read_text())
    assert (r.driver_version, r.cuda_version, len(r.gpus)) == (driver, cuda, count)
    assert r.gpus[0].name == model and r.gpus[0].memory_total_mib == mem


@pytest.mark.parametrize("name, ident, version, family, pkg, firewall", [
    ("centos7", "centos", "7", "rhel", "yum", "firewalld"),
    ("rocky9", "rocky", "9.3", "rhel", "dnf", "firewalld"),
    ("ubuntu2204", "ubuntu", "22.04", "debian", "apt-get", "ufw"),
    ("debian12", "debian", "12", "debian", "apt-get", "ufw"),
])
def test_os_release(name, ident, version, family, pkg, firewall):
    info = parse_os_release((FIXTURES / "os-release" / name).read_text())
    assert (info.id, info.version_id, info.family) == (ident, version, family)
    assert (info.pkg, info.firewall) == (pkg, firewall)
    assert info.pretty


@pytest.mark.parametrize("name, port, state", [
    ("firewall-cmd-list-all-public-active.txt", 29500, BLOCKED),
    ("firewall-cmd-list-all-public-active.txt", 22, OPEN),  # the ssh service
    ("firewall-cmd-list-all-ports.txt", 6551, OPEN),
    ("firewall-cmd-list-all-ports.txt", 29500, BLOCKED),
    ("firewall-cmd-list-all-trusted.txt", 29500, OPEN),
])
def test_firewalld_fixtures(name, port, state):
    state_text = (FW / "firewall-cmd-state.txt").read_text()
    assert firewalld_verdict(state_text, (FW / name).read_text(), port).state == state


@pytest.mark.parametrize("name, port, state", [
    ("ufw-status-active.txt", 23, OPEN),
    ("ufw-status-active.txt", 80, BLOCKED),
    ("ufw-status-active.txt", 29500, OPEN),  # "Anywhere ALLOW 10.0.0.0/8" trusts the LAN
    ("ufw-status-verbose-active.txt", 29500, None),
])
def test_ufw_fixtures(name, port, state):
    v = ufw_verdict((FW / name).read_text(), port)
    if state is None:
        assert v is not None and v.state in (OPEN, BLOCKED)
    else:
        assert v.state == state


def test_ufw_inactive_fixture():
    assert ufw_verdict((FW / "ufw-status-inactive.txt").read_text(), 29500) is None


@pytest.mark.parametrize("name, port, state", [
    ("iptables-S-accept-basic.txt", 29500, OPEN),
    ("iptables-S-drop-tcp-80.txt", 80, BLOCKED),
    ("iptables-S-drop-tcp-80.txt", 29500, OPEN),
    ("iptables-S-drop-policy-reject.txt", 22, OPEN),  # INPUT -> TCP chain accepts 22
    ("iptables-S-drop-policy-reject.txt", 29500, BLOCKED),
    ("iptables-S-docker-filter.txt", 29500, None),  # no INPUT rules at all: nothing to judge
])
def test_iptables_fixtures(name, port, state):
    v = iptables_verdict((FW / name).read_text(), port)
    assert (v.state if v else None) == state
