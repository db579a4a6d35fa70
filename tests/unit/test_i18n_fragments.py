"""No English left in a Chinese line: messages that used to be assembled from English pieces
(step lists, install reasons, link states, stack places, lint's option text and NCCL names)
are rendered in zh_CN and searched for the English words they were built from."""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path

import pytest

from ddpkit import i18n

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HAN = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture
def zh():
    i18n.set_language("zh_CN")
    yield
    i18n.set_language("en")


def english_in(text: str, words: list[str]) -> list[str]:
    """The words (whole words, case-sensitive) of `words` that occur in `text`."""
    return [w for w in words if re.search(rf"(?<![\w-]){re.escape(w)}(?![\w-])", text)]


def _console():
    from rich.console import Console

    buf = io.StringIO()
    return Console(file=buf, width=300, highlight=False), buf


# ---- setup all: the done / pending / not-run lists of steps ---------------------------------

def _finish(steps, apply=False):
    from ddpkit.cli.setup_all import _finish
    from ddpkit.launch.hosts import Host

    out, buf = _console()
    args = argparse.Namespace(json=False, apply=apply, python=None)
    _finish(args, steps, out, [Host("node0"), Host("node1")])
    return buf.getvalue()


def _step(name, exit=0, changed=False, pending=False):
    return {"step": name, "exit": exit, "changed": changed, "pending": pending}


@pytest.mark.parametrize("steps", [
    [_step("ssh", exit=1)],
    [_step("ssh"), _step("firewall"), _step("torch", exit=1)],
    [_step("ssh"), _step("firewall", pending=True), _step("torch")],
    [_step("ssh"), _step("firewall"), _step("torch", pending=True)],
    [_step("ssh"), _step("firewall", pending=True), _step("torch", pending=True)],
    [_step("ssh", changed=True), _step("firewall", changed=True), _step("torch")],
    [_step("ssh"), _step("firewall"), _step("torch")],
], ids=["ssh-failed", "torch-failed", "pending-fw", "pending-torch", "pending-both",
        "changed", "nothing"])
def test_setup_all_summary_is_one_chinese_sentence(zh, steps):
    text = _finish(steps)
    assert HAN.search(text)
    assert not english_in(text, ["none", "and", "would", "change", "changed", "done",
                                 "nothing", "steps", "not", "run", "works", "every"]), text


def test_setup_all_summary_in_english_keeps_its_words():
    text = _finish([_step("ssh", exit=1)])
    assert "(steps not run: setup firewall, setup torch)" in text
    both = [_step("ssh"), _step("firewall", pending=True), _step("torch", pending=True)]
    assert "the firewalls and torch would change" in _finish(both)
    assert "done (changed: setup ssh)" in _finish([_step("ssh", changed=True)])


# ---- setup torch: the plan's table, notes, reasons and the install log ----------------------

def test_setup_torch_plan_and_install_lines_in_chinese(zh, capsys):
    from ddpkit.cli.setup_nodes import _print_torch
    from ddpkit.prepare.setup import torch as st

    nodes = [st.TorchNode("a", "3.11.7", "2.6.0+cpu", ""),
             st.TorchNode("b", "3.11.7", "", "550.54.14"),
             st.TorchNode("c", "3.11.7", "2.9.0+cu126", "550.54.14"),
             st.TorchNode("d", "3.11.7", "", "550.54.14", pip=False)]
    plan = st.plan_torch(nodes, "2.7.1", python="py")
    _print_torch(plan, nodes, apply=False)
    # the pip command lines ("  a: py -m pip install ...") are commands, never translated
    text = "\n".join(ln for ln in capsys.readouterr().out.splitlines()
                     if " -m pip " not in ln)
    logs = [i18n._(st._INSTALLING[r]).format(name="a", want="2.7.1+cpu") for r in st.CHANGES]
    text += "\n".join(logs)
    assert HAN.search(text)
    assert not english_in(text, ["install", "upgrade", "downgrade", "another", "build",
                                 "refused", "refusing", "nothing", "note", "has", "gets",
                                 "action", "node", "driver", "already", "newer", "some",
                                 "FAIL", "fix"]), text
    assert "--allow-downgrade" in text  # flags stay as they are


def test_setup_torch_reason_of_an_install_stays_an_id(zh):
    from ddpkit.prepare.setup import torch as st

    plan = st.plan_torch([st.TorchNode("a", "3.11.7", "2.6.0+cpu", "")], "2.7.1", python="py")
    assert plan.steps[0].to_dict()["reason"] == "upgrade"


# ---- lint: the local-rank option and NCCL names; doctor: the same names ----------------------

LOCAL_RANK_SCRIPT = """\
import argparse
import torch.distributed as dist
p = argparse.ArgumentParser()
p.add_argument("--local_rank", type=int, required=True)
args = p.parse_args()
dist.init_process_group("nccl")
torch.cuda.set_device(args.local_rank)
"""

NAMES = ["NCCL_BLOCKING_WAIT", "NCCL_SOCKET_TIMEOUT", "NCCL_LL_THRESHOLD", "NCCL_OFI_X",
         "NCCL_SOCKET_IFNAM", "NCCL_FOO_TIMEOUT", "NCCL_ZZZQQQ"]


def test_lint_messages_in_chinese(zh):
    from ddpkit.troubleshoot.lint import lint_text
    from ddpkit.troubleshoot.lint.envnames import judge

    found = lint_text("train.py", LOCAL_RANK_SCRIPT)
    text = "\n".join(f.message for f in found if f.kind == "local_rank_arg")
    assert text and HAN.search(text)
    text += "\n" + "\n".join(judge(n)[1] for n in NAMES)
    assert not english_in(text, ["required", "option", "read", "reads", "spelling", "ignores",
                                 "does", "nothing", "removed", "plugin", "network", "mean",
                                 "timeouts", "itself", "variable"]), text


def test_doctor_and_lint_share_one_classifier():
    from ddpkit.data.envnames import classify
    from ddpkit.prepare.checks.envvars import judge_name
    from ddpkit.troubleshoot.lint.envnames import judge

    assert classify("NCCL_BLOCKING_WAIT").kind == "renamed"
    assert classify("NCCL_BLOCKING_WAIT").suggestion == "TORCH_NCCL_BLOCKING_WAIT"
    assert classify("NCCL_SOCKET_TIMEOUT").kind == "noop"
    assert classify("NCCL_OFI_X").kind == "plugin"
    assert classify("NCCL_DEBUG") is None and classify("TORCH_NCCL_BLOCKING_WAIT") is None
    unknown = classify("TORCH_NCCL_BLOCKIN_WAIT")
    assert (unknown.kind, unknown.reader, unknown.suggestion) == (
        "unknown", "torch", "TORCH_NCCL_BLOCKING_WAIT")
    # lint suggests only very close names; a plugin's name is fine for the doctor, a note in lint
    assert classify("NCCL_FOO_TIMEOUT", 0.85).timeout
    assert judge_name("NCCL_OFI_X") is None and judge("NCCL_OFI_X")[0] == "info"
    assert judge("NCCL_SOCKET_IFNAM") == (
        "warn", "NCCL_SOCKET_IFNAM is not a variable NCCL reads (did you mean NCCL_SOCKET_IFNAME?)")


def test_doctor_env_names_in_chinese(zh):
    from ddpkit.prepare.checks.envvars import judge_name

    results = [judge_name(n) for n in NAMES + ["TORCH_NCCL_BLOCKIN_WAIT"]]
    text = "\n".join(f"{r.summary} {r.detail}" for r in results if r)
    assert HAN.search(text)
    assert not english_in(text, ["spelling", "reads", "removed", "does", "nothing", "mean",
                                 "variable", "deprecated"]), text


# ---- demo: the names of its checks ------------------------------------------------------------

def test_demo_checks_in_chinese(zh):
    from ddpkit.verify.demo import judge

    rank = {"loss_first": 1.0, "loss_last": 0.001, "weight_error": 0.01,
            "params_identical": True, "allreduce_sum": 3.0, "allreduce_expected": 3.0}
    verdict = judge({0: rank, 1: rank}, 2, 0)
    text = "\n".join(f"{c.label}: {c.detail}" for c in verdict.checks)
    assert not english_in(text, ["loss", "fell", "true", "weights", "identical", "parameters",
                                 "run", "ranks"]), text
    assert [c.name for c in verdict.checks][2:5] == ["loss fell", "true weights",
                                                     "identical parameters"]  # JSON ids


# ---- stacks: places, groups, the header and the saved stacks; the hang watcher -----------------

def _nodes(name):
    from ddpkit.launch.stackdump import NodeStacks

    return NodeStacks.from_dict(json.loads((FIX / "stacks" / f"{name}.json").read_text()))


def test_stack_report_lines_in_chinese(zh, capsys):
    from dataclasses import replace

    from ddpkit.cli.stacks import show
    from ddpkit.troubleshoot.stacks import Place, busy, judge

    texts = []
    for name in ("sleep", "desync", "noinit", "rendezvous"):
        rep = judge([_nodes(name)], world_size=5, hosts=["localhost", "node9"])
        texts += rep.lines()
        show([("r1", rep), ("r2", rep)], 1.0, False)
    node = _nodes("sleep")
    texts += [t for t in busy([replace(node, procs=tuple(
        replace(p, threads=tuple({**t, "active": True} for t in p.threads))
        for p in node.procs))])]
    texts += [Place("user", "f", "t.py", 3, "<module>", "x, y.py").text,
              Place("user", "f", "", 0, "f", "x, y.py").text, Place("unknown", "").text]
    text = "\n".join(texts) + capsys.readouterr().out
    assert HAN.search(text)
    assert not english_in(text, ["at", "in", "module", "code", "ranks", "process", "found",
                                 "node", "job", "taken", "cannot", "fix", "starting",
                                 "workers", "started", "stack"]), text


def test_saved_stacks_header_in_chinese(zh, capsys, tmp_path):
    from types import SimpleNamespace

    from ddpkit.cli.stacks import show_saved

    for why in ("hang", "interrupt"):
        (tmp_path / "stacks.json").write_text(json.dumps({"why": why, "verdict": "v"}))
        info = SimpleNamespace(dir=tmp_path, name="ddpkit-x", state="hung")
        show_saved(info, argparse.Namespace(json=False))
    text = capsys.readouterr().out.replace("（hung）", "")  # the run's state: an id
    assert HAN.search(text) and not english_in(text, ["hung", "was", "interrupted", "taken"])


def test_hang_watch_progress_in_chinese(zh, monkeypatch, tmp_path):
    from dataclasses import replace

    from ddpkit.launch.hosts import Host
    from ddpkit.launch.remote import SshOptions
    from ddpkit.troubleshoot import hang

    node = _nodes("sleep")
    busy = replace(node, procs=tuple(
        replace(p, threads=tuple({**t, "active": True} for t in p.threads)) for p in node.procs))
    samples = [[busy], [replace(node, procs=())]]
    monkeypatch.setattr(hang, "take_stacks", lambda *a, **k: samples.pop(0))
    said: list[str] = []
    watch = hang.HangWatch([Host("localhost")], [True], SshOptions(), "python", "r", 3, None,
                           say=said.append)
    assert watch("hang") is False and watch("hang") is False
    text = "\n".join(said)
    assert len(said) == 2 and HAN.search(text)
    assert not english_in(text, ["output", "while", "hung", "process", "started", "yet"]), text


# ---- check: blocked links, per state and kind; the link matrix's cells -------------------------

@pytest.mark.parametrize("state", ["filtered", "refused", "no_route", "error"])
def test_link_problems_in_chinese(zh, state):
    from ddpkit.cli.check import LINK_CELL
    from ddpkit.launch.netcheck import Link, link_problems

    links = [Link("node1", "node0", "10.0.0.1", 29500, "rendezvous", state),
             Link("node1", "node2", "10.0.0.3", 40000, "peer", state),
             Link("node2", "node1", "10.0.0.2", 40001, "peer", state),
             Link("node2", "node0", "10.0.0.1", 40002, "peer", state)]
    problems = link_problems(links, {}, "10.0.0.0/24", 29500)
    text = "\n".join(p.message for p in problems)
    text += "\n" + "\n".join(i18n._(LINK_CELL[(k, state)]) for k in ("rendezvous", "peer"))
    assert len(problems) == 3 and HAN.search(text)
    assert not english_in(text, [state, "cannot", "reach", "peer", "traffic", "dropped",
                                 "although", "route", "connect", "failed"]), text


def test_link_problems_in_english_keep_the_state_word():
    from ddpkit.launch.netcheck import Link, link_problems

    links = [Link("node1", "node0", "10.0.0.1", 29500, "rendezvous", "filtered")]
    (p,) = link_problems(links, {}, "10.0.0.0/24", 29500)
    assert p.message.startswith("node1 cannot reach node0 on the rendezvous port 29500: "
                                "filtered, dropped: a firewall on node0 drops it (plain")


# ---- argument errors ----------------------------------------------------------------------------

def test_argument_type_errors_in_chinese(zh):
    from ddpkit.cli.common import non_negative, positive
    from ddpkit.cli.habits import nproc_value

    said = []
    for parse, text in ((positive(int), "x"), (positive(int), "0"), (non_negative, "-1"),
                        (nproc_value, "x"), (nproc_value, "0")):
        with pytest.raises(argparse.ArgumentTypeError) as e:
            parse(text)
        said.append(str(e.value))
    assert all(HAN.search(s) for s in said)
    assert not english_in("\n".join(said), ["must", "number", "greater", "least", "more"])


# ---- ssh failures, crashes at exit, slow links, a launch that cannot start ---------------------

SSH_ERRORS = ["Host key verification failed.", "Permission denied (publickey).",
              "ssh: Could not resolve hostname x: Name or service not known",
              "ssh: connect to host x port 22: Connection refused",
              "ssh: connect to host x port 22: Connection timed out",
              "ssh: connect to host x port 22: No route to host",
              "Connection closed by 10.0.0.1 port 22", "Bad configuration option: foo",
              "", "something else"]


def test_ssh_failures_in_chinese(zh):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.remote import classify_ssh_error

    fails = [classify_ssh_error(e, Host("node1")) for e in SSH_ERRORS]
    text = "\n".join(f.message for f in fails)
    assert all(HAN.search(f.message) and HAN.search(f.fix) for f in fails if f.kind != "other")
    assert not english_in(text, ["host", "key", "verification", "failed", "accepted",
                                 "resolve", "connection", "refused", "listening", "timed",
                                 "route", "closed", "configuration", "message"]), text
    assert "ssh-keygen -R node1" in fails[0].fix  # commands stay as they are


def test_exit_crash_and_bench_notes_in_chinese(zh):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.launcher import PreflightError
    from ddpkit.launch.probe import NodeProblem
    from ddpkit.launch.shutdown import describe
    from ddpkit.verify.bench.pairs import judge_pairs

    texts = [describe([(-6, 24176)], {24175: (0, 0), 24176: (1, 0)}, 2),
             describe([(-99, 24176)], {24176: (1, 0)}, 3),
             describe([(3, 24176)], {24176: (1, 0)}, 3)]
    pairs = [("a", "b", 10.0), ("a", "c", 10.0), ("b", "c", 1.0)]
    texts += [judge_pairs([], []).note, judge_pairs(pairs, ["a", "b", "c"]).note,
              judge_pairs([("a", "b", 1.0), ("a", "c", 1.0), ("b", "c", 10.0), ("a", "d", 1.0),
                           ("b", "d", 10.0), ("c", "d", 10.0)], list("abcd")).note,
              judge_pairs([("a", "b", 5.0)] * 3, ["a", "b"]).note]
    texts.append(str(PreflightError([NodeProblem(Host("n1"), "python", "m", "f")])))
    text = "\n".join(texts)
    assert all(HAN.search(t) for t in texts), texts
    assert not english_in(text, ["all", "finished", "training", "crashed", "during", "killed",
                                 "signal", "exit", "code", "clearly", "slower", "link",
                                 "fewer", "nodes", "node", "ready"]), text


# ---- firewall verdicts (doctor) and plans (setup firewall); setup ssh's failures -------------

FW = FIX / "firewall"


def test_firewall_verdicts_and_plans_in_chinese(zh):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.plan import Addr
    from ddpkit.parsers.firewall import firewalld_verdict, iptables_verdict, judge_port, ufw_verdict
    from ddpkit.prepare.setup import firewall as fw

    state = (FW / "firewall-cmd-state.txt").read_text()
    verdicts = [firewalld_verdict(state, (FW / f).read_text(), 29500) for f in (
        "firewall-cmd-list-all-ports.txt", "firewall-cmd-list-all-public-active.txt",
        "firewall-cmd-list-all-public-default.txt", "firewall-cmd-list-all-trusted.txt")]
    verdicts += [ufw_verdict((FW / "ufw-status-verbose-active.txt").read_text(), p)
                 for p in (22, 29500)]
    verdicts += [iptables_verdict((FW / f).read_text(), 29500) for f in (
        "iptables-S-accept-basic.txt", "iptables-S-drop-policy-reject.txt",
        "iptables-S-drop-tcp-80.txt")]
    verdicts += [iptables_verdict("-P INPUT ACCEPT\n-A INPUT -p tcp --dport 29500 -j DROP\n",
                                  29500), judge_port({}, 29500)]
    text = "\n".join(v.detail for v in verdicts if v)
    nodes = [fw.NodeFw(Host("n0"), access, {"ufw": (FW / "ufw-status-inactive.txt").read_text(),
                                             "iptables": (FW / "iptables-S-drop-policy-reject.txt").read_text()},
                       (Addr("eth0", "10.20.0.5/24"),), ())
             for access in ("root", "none")]
    plans = [fw.plan_node(n, master=True, port=29500, subnet="10.20.0.0/24", stop=stop)
             for n in nodes for stop in (False, True)]
    text += "\n" + "\n".join([s.why for p in plans for s in p.steps + p.persist]
                             + [n for p in plans for n in p.notes] + [p.error for p in plans])
    assert HAN.search(text)
    # ("target default" is firewalld's own value; root is root)
    assert not english_in(text, ["open", "allows", "blocks", "drops", "rejects", "accepts",
                                 "zone", "rule", "policy", "incoming", "found", "trust",
                                 "subnet", "keep", "reboot", "lost", "stop", "needs",
                                 "password", "firewall"]), text


def test_setup_ssh_failures_in_chinese(zh):
    from ddpkit.launch.hosts import Host
    from ddpkit.launch.remote import Reply, SshOptions
    from ddpkit.prepare.setup import ssh

    host = Host("node1")
    fails = [ssh._failed(host, Reply(host, None, "", "x"), SshOptions(), i18n._("cannot log in")),
             ssh._failed(host, Reply(host, 1, "", ""), SshOptions(), i18n._("cannot log in"))]
    text = "\n".join(f"{f.message}\n{f.fix}" for f in fails) + "\n" + ssh.host_key_fix("n", [])
    assert HAN.search(text)
    assert not english_in(text, ["cannot", "log", "check", "by", "hand", "look", "there",
                                 "reinstalled", "compare", "otherwise", "connect"]), text


def test_lint_call_chains_in_chinese(zh):
    from ddpkit.troubleshoot.lint.pysync import shown

    chains = ["evaluate() -> DDP forward of model (no_grad)", "f() -> g() -> DDP forward",
              "DDP forward (no_grad)", "f() -> forward of net (if it is the DDP-wrapped model)"]
    text = "\n".join(shown(c) for c in chains)
    assert text.count("evaluate() -> ") == 1 and shown("barrier") == "barrier"
    assert not english_in(text, ["of", "if", "it", "is", "the", "wrapped"]), text  # model: a name


def test_horovod_steps_host_forms_and_sizes_in_chinese(zh):
    from ddpkit.errors import UsageError
    from ddpkit.launch.hosts import parse_host
    from ddpkit.prepare.setup.horovod import plan
    from ddpkit.verify.bench.table import parse_size

    text = "\n".join(s.what for s in plan("py", "0.28.1", Path("/tmp/w")))
    for bad, parse in (("node0:x", parse_host), ("12Q", parse_size)):
        with pytest.raises(UsageError) as e:
            parse(bad)
        text += f"\n{e.value.message}\n{e.value.hint}"
    assert HAN.search(text)
    assert not english_in(text, ["install", "download", "build", "against", "check", "source",
                                 "write", "size", "bytes", "optional"]), text
