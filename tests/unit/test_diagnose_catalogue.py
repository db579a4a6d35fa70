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


@pytest.mark.parametrize("msg", SCORED, ids=lambda m: f"{m.project}:{m.line[:60]}")
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
