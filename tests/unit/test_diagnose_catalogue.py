"""The message catalogue (tests/fixtures/diagnose/messages): the failure messages of torch,
NCCL, Gloo, Open MPI, Horovod, DeepSpeed, accelerate and CUDA in the wordings of their releases,
taken from the projects' sources. A user who pastes one such line gets its cause; a line that
healthy runs print too gets nothing."""

import pytest

from ddpkit.troubleshoot.diagnose.matcher import diagnose_report
from tests.diagnose_corpus import load_messages

MESSAGES = load_messages()
SCORED = [m for m in MESSAGES if m.kind != "fact"]


def test_the_catalogue_covers_every_project_and_names_its_sources():
    assert len(SCORED) >= 400
    assert {"nccl", "pytorch", "gloo", "openmpi", "horovod", "deepspeed", "accelerate"} <= {
        m.project for m in MESSAGES}
    for m in MESSAGES:
        assert m.url.startswith("https://"), m.line
        assert m.kind in ("cause", "symptom", "fact"), m.line


# Lines no rule reads yet, each for its reason; strict, so a rule that learns one says so.
KNOWN_MISSES = {
    # SpeechBrain: a --distributed_backend value torch does not know, in its own (misspelt) words
    "ValueError: NCCL communcation protocol doesn't exist.",
    # SpeechBrain: the other processes were killed; why is on their lines, not this one
    "speechbrain.core - Only the main process is alive, all other subprocess were killed.",
    # DGL's RPC: its own wait for a peer, in words no other library uses
    "dgl._ffi.base.DGLError: Timed out for receiving message within 600000 milliseconds",
    # DGL: a shared-memory segment of the servers that is gone, not one that is too small
    "dgl._ffi.base.DGLError: [08:41:17] /opt/dgl/src/runtime/shared_mem.cc:115: Check failed: fd_ != -1 "
    "(-1 vs. -1) : fail to open node:feat: No such file or directory",
}


@pytest.mark.parametrize("msg", [
    pytest.param(m, marks=pytest.mark.xfail(strict=True, reason="known miss"))
    if m.line in KNOWN_MISSES else m for m in SCORED], ids=lambda m: f"{m.project}:{m.line[:60]}")
def test_one_line_names_its_cause(msg):
    report = diagnose_report(msg.line.splitlines())
    got = [f.category for f in report.findings]
    assert got and msg.right(got[0]), (msg.category, got[:3])
    assert report.findings[0].evidence.get("text"), "the finding names the line it rests on"


def test_lines_that_healthy_runs_print_are_no_finding():
    facts = [m.line for m in MESSAGES if m.kind == "fact"]
    assert facts
    report = diagnose_report("\n".join(facts).splitlines())
    assert [f.category for f in report.findings if f.category != "unknown"] == []


def test_known_misses_are_catalogue_lines():
    assert KNOWN_MISSES <= {m.line for m in SCORED}
