"""Translations: complete, faithful to placeholders and commands, in step with the source, and
chosen the way a Chinese locale expects."""

from __future__ import annotations

import gettext
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir  # the [test] extra has babel
from babel.messages.pofile import read_po

from ddpkit import i18n
from ddpkit.data.extract import extract_toml

ROOT = Path(__file__).resolve().parents[2]
PO = ROOT / "src/ddpkit/locale/zh_CN/LC_MESSAGES/ddpkit.po"
MO = PO.with_suffix(".mo")
GOLDEN = ROOT / "tests/fixtures/i18n"
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
PLACEHOLDER = re.compile(r"\{[^{}]*\}|%\([a-z_]+\)[sdr]|%[sdr]")
# a quoted name or command: 'nvidia-smi -L' (an apostrophe inside a word is not a quote)
QUOTED = re.compile(r"(?:^|(?<=[\s(]))'([^'\n]+?)'(?=$|[\s),;:.])")


def _source_msgids() -> set[str]:
    ids = set()
    for _file, _line, message, _comments, _ctx in extract_from_dir(
            str(ROOT), method_map=[("src/ddpkit/**.py", "python"),
                                   ("src/ddpkit/**.toml", extract_toml)], keywords=KEYWORDS):
        ids.add(message if isinstance(message, str) else message[0])
    return ids


@pytest.fixture(scope="module")
def catalog():
    with PO.open("rb") as f:
        return {m.id if isinstance(m.id, str) else m.id[0]: m for m in read_po(f) if m.id}


def _text(m) -> str:
    return m.string if isinstance(m.string, str) else m.string[0]


def test_every_message_in_the_source_has_a_chinese_translation(catalog):
    missing = sorted(i for i in _source_msgids() if i not in catalog or not _text(catalog[i])
                     or catalog[i].fuzzy)
    assert not missing, f"{len(missing)} message(s) without zh_CN translation (run `make i18n`, " \
                        f"then translate): {missing[:10]}"


def test_catalog_is_not_stale(catalog):
    stale = sorted(set(catalog) - _source_msgids())
    assert not stale, f"the catalog holds messages the source no longer has (`make i18n`): " \
                      f"{stale[:10]}"


def test_translations_keep_every_placeholder(catalog):
    bad = [(i, _text(m)) for i, m in catalog.items()
           if sorted(PLACEHOLDER.findall(i)) != sorted(PLACEHOLDER.findall(_text(m)))]
    assert not bad, bad[:5]


def test_quoted_commands_and_names_stay_untranslated(catalog):
    bad = [(i, q) for i, m in catalog.items() for q in QUOTED.findall(i) if q not in _text(m)]
    assert not bad, bad[:5]


def test_compiled_catalog_matches_the_po(catalog):
    with MO.open("rb") as f:
        mo = gettext.GNUTranslations(f)
    stale = [i for i, m in catalog.items() if mo.gettext(i) != _text(m)]
    assert not stale, f"ddpkit.mo is older than ddpkit.po (`make i18n` compiles it): {stale[:5]}"


@pytest.mark.parametrize("env, lang", [
    ({"LANG": "zh_CN.UTF-8"}, "zh_CN"),
    ({"LANG": "zh_TW.UTF-8"}, "zh_CN"),
    ({"LANG": "zh_HK.UTF-8"}, "zh_CN"),
    ({"LC_ALL": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh_CN"),
    ({"LC_ALL": "en_US.UTF-8", "LANG": "zh_CN.UTF-8"}, "en"),
    ({"LC_MESSAGES": "zh_CN.UTF-8", "LANG": "en_US.UTF-8"}, "zh_CN"),
    ({"LANG": "en_US.UTF-8", "LANGUAGE": "zh_CN:en"}, "zh_CN"),
    ({"LANG": "C", "LANGUAGE": "zh_CN"}, "en"),
    ({"LANG": "C.UTF-8"}, "en"),
    ({}, "en"),
])
def test_language_follows_the_locale(env, lang):
    assert i18n.detect(env) == lang


def test_english_is_the_message_itself_and_chinese_comes_from_the_catalog():
    try:
        i18n.set_language("en")
        assert i18n._("port {port} is free") == "port {port} is free"
        i18n.set_language("zh")
        assert i18n._("port {port} is free") == "端口 {port} 空闲"
        assert i18n._("a message nobody translated") == "a message nobody translated"
    finally:
        i18n.set_language("en")


def _doctor_text(monkeypatch, capsys, lang: str) -> str:
    from ddpkit.cli.doctor import show
    from ddpkit.parsers.osrelease import OsInfo
    from ddpkit.prepare.checks import evaluate
    from ddpkit.prepare.checks.base import Iface, Snapshot, SshFacts, TorchFacts
    from ddpkit.prepare.doctor import DoctorReport

    snapshot = Snapshot(
        hostname="node0", hostname_addrs=("127.0.1.1",), python_version="3.11.7",
        python_executable="/venv/bin/python", in_venv=True,
        os=OsInfo(id="rocky", version_id="9.3", family="rhel"),
        torch=TorchFacts(installed=True, version="2.13.0+cpu", backends={"gloo": True}),
        interfaces=(Iface("lo", ("127.0.0.1/8",)), Iface("eth0", ("10.0.0.5/24",))),
        shm_bytes=64 * 2**20, nofile=(1024, 4096), memlock=(-1, -1), cpu_count=32,
        ssh=SshFacts(client="/usr/bin/ssh", dir_mode=0o755, authorized_keys_mode=0o644),
        env={"NCCL_SOCKET_TIMEOUT": "600", "GLOO_SOCKET_IFNAME": "^docker0"},
    )
    snapshot = replace(snapshot, master_port=29500)
    monkeypatch.setenv("COLUMNS", "110")
    monkeypatch.setenv("TERM", "dumb")
    try:
        i18n.set_language(lang)
        show(DoctorReport(snapshot, tuple(evaluate(snapshot))))
    finally:
        i18n.set_language("en")
    return capsys.readouterr().out


def test_doctor_in_chinese_matches_its_golden_output(monkeypatch, capsys):
    text = _doctor_text(monkeypatch, capsys, "zh_CN")
    golden = GOLDEN / "doctor.zh_CN.txt"
    if os.environ.get("DDPKIT_UPDATE_GOLDEN"):  # rewrite it, review the diff, commit it
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), "run with DDPKIT_UPDATE_GOLDEN=1 after a wanted change"
    assert "共享内存" in text and "修复：" in text and "失败" in text
    # commands in the fixes are never translated
    assert "ssh-keygen -t ed25519" not in text or "chmod 700 ~/.ssh" in text
    assert "export GLOO_SOCKET_IFNAME=" in text


def test_doctor_in_english_is_unchanged_by_the_catalogs(monkeypatch, capsys):
    text = _doctor_text(monkeypatch, capsys, "en")
    assert "fix: " in text and "/dev/shm is only 64 MiB" in text
    assert not re.search(r"[\u4e00-\u9fff]", text)


def _check_text(monkeypatch, capsys, lang: str) -> str:
    """`ddpkit check`'s report for a failing 3-node cluster: an odd torch on node1, a
    firewall on node0 dropping the rendezvous port."""
    from ddpkit.cli.check import show
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.netcheck import Link, LinkReport
    from ddpkit.verify.preflight import CheckReport, NodeCheck, find_mismatches, judge

    def node(name, **facts):
        base = {"python": "3.11.7", "python_minor": "3.11", "torch": "2.13.0+cu128",
                "cuda": "12.8", "nccl": "2.27.3", "driver": "570.124.06",
                "gpu_model": "NVIDIA H100", "gpu_count": 8, "ddpkit": "0.1.0",
                "hostname": name, "hostname_addrs": [f"10.0.0.{name[-1]}"],
                "firewall": "firewalld", "addrs": [f"eth0 10.0.0.{name[-1]}/24"]}
        base.update(facts)
        return NodeCheck(Host(name), base, doctor={"status": "ok", "checks": []})

    monkeypatch.setenv("COLUMNS", "110")
    monkeypatch.setenv("TERM", "dumb")
    try:
        i18n.set_language(lang)
        nodes = [node("node0"), node("node1", torch="2.1.0+cu118", cuda="11.8"), node("node2")]
        links = tuple(Link(src=s, dst="node0", ip="10.0.0.0", port=29500, kind="rendezvous",
                           state="filtered") for s in ("node1", "node2"))
        report_links = LinkReport(links, {}, {})
        rec = {"subnet": "10.0.0.0/24", "master": "10.0.0.0"}
        problems = judge(nodes, report_links, rec, 29500, "node0")
        show(CheckReport(tuple(nodes), tuple(find_mismatches(nodes)), links, rec,
                         tuple(problems), 29500, 1.5))
    finally:
        i18n.set_language("en")
    return capsys.readouterr().out


def _diagnose_text(lang: str) -> str:
    import io

    from ddpkit.cli.diagnose import show
    from ddpkit.troubleshoot.diagnose.matcher import diagnose_report

    log = (FIXTURES_DIAG / "local" / "script-keyerror-rank1.log").read_text()
    try:
        i18n.set_language(lang)
        out = io.StringIO()
        show(diagnose_report(log.splitlines()), out)
    finally:
        i18n.set_language("en")
    return out.getvalue()


FIXTURES_DIAG = ROOT / "tests/fixtures/diagnose"


@pytest.mark.parametrize("name", ["check", "diagnose"])
def test_golden_chinese_outputs(monkeypatch, capsys, name):
    text = (_check_text(monkeypatch, capsys, "zh_CN") if name == "check"
            else _diagnose_text("zh_CN"))
    golden = GOLDEN / f"{name}.zh_CN.txt"
    if os.environ.get("DDPKIT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text(), "run with DDPKIT_UPDATE_GOLDEN=1 after a wanted change"
    assert re.search(r"[\u4e00-\u9fff]", text)
    english = (_check_text(monkeypatch, capsys, "en") if name == "check"
               else _diagnose_text("en"))
    assert not re.search(r"[\u4e00-\u9fff]", english)


@pytest.mark.parametrize("argv", [["--lang", "zh", "launch", "-H", "a:0", "x.py"],
                                  ["launch", "--lang", "zh", "-H", "a:0", "x.py"]])
def test_lang_before_or_after_the_command_translates_errors(argv):
    from tests.conftest import ddpkit

    done = ddpkit(*argv)
    assert done.returncode == 2
    assert done.stderr.startswith("ddpkit：错误：") and "提示：" in done.stderr
    assert "Traceback" not in done.stderr
