"""ddpkit diagnose as a user runs it, and diagnosis of failures caused live."""

import json

import pytest

from tests import diagnose_corpus
from tests.conftest import FIXTURES, SCRIPTS_DIR, ddpkit

LOCAL = FIXTURES / "diagnose" / "local"


def test_file_and_json():
    done = ddpkit("diagnose", str(LOCAL / "gloo-iface-missing.log"), "--json")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["schema"] == 1
    top = report["findings"][0]
    assert set(top) >= {"id", "category", "confidence", "title", "evidence", "fix", "source"}
    assert top["category"] == "nccl_interface_selection" and top["evidence"]["iface"] == "nosuch0"
    confidences = [f["confidence"] for f in report["findings"]]
    assert confidences[0] == max(confidences)


def test_stdin_and_human_output():
    text = (LOCAL / "port-in-use.log").read_text()
    done = ddpkit("diagnose", "-", input=text)
    assert done.returncode == 0
    assert done.stdout.startswith("1. [port_in_use_or_firewall]")
    assert "port=29511" in done.stdout and "fix:" in done.stdout and "source: https://" in done.stdout


def test_a_log_without_failure_has_no_finding_and_exits_1():
    done = ddpkit("diagnose", "-", "--json", input="epoch 1 loss 0.5\nall good\n")
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["findings"] == [] and report["category"] == "none"
    # never an empty answer: the last lines (a hang prints nothing) and what to check next
    assert report["decisive_lines"][-1]["text"] == "all good"
    assert any("ddpkit stacks" in c for c in report["next_checks"])
    # Issue 12: "unknown" now means a failure with no known cause; a clean log says "none".
    assert "category: none" in ddpkit("diagnose", "-", input="fine\n").stdout


def test_an_unknown_failure_shows_the_decisive_lines_and_next_checks():
    log = ("$ torchrun --nproc-per-node 2 train.py\n[rank1]: frobnicator failed with status 7\n"
           "[rank0]: waiting\n")
    done = ddpkit("diagnose", "-", input=log)
    assert done.returncode == 1
    assert done.stdout.startswith("unknown: no known cause")
    assert "[first error of rank 1]: frobnicator failed" in done.stdout
    assert "ddpkit check -H" in done.stdout and "ddpkit stacks" in done.stdout
    report = json.loads(ddpkit("diagnose", "-", "--json", input=log).stdout)
    assert report["category"] == "unknown" and report["findings"][0]["category"] == "unknown"
    assert report["decisive_lines"] and report["next_checks"]


def test_a_run_directory_names_the_rank_that_failed_first(tmp_path):
    """A real run: rank 1 hits a bug of the script, rank 0 waits for it in a collective."""
    logs = tmp_path / "run"
    done = ddpkit("launch", "--nproc-per-node", "2", "--log-dir", str(logs),
                  str(SCRIPTS_DIR / "failures" / "keyerror_rank1.py"))
    assert done.returncode == 1
    assert "diagnosis: [script_error]" in done.stderr
    report = json.loads(ddpkit("diagnose", str(logs), "--json").stdout)
    top = report["findings"][0]
    assert top["category"] == "script_error" and top["evidence"]["where"] == "localhost:1"
    assert top["evidence"]["source"] == "rank1.log" and "keyerror_rank1.py:10" in top["title"]
    assert report["first_failure"]["where"] == "localhost:1"


def test_missing_file_is_usage_error():
    done = ddpkit("diagnose", "/no/such/log")
    assert done.returncode == 2 and "cannot read /no/such/log" in done.stderr


@pytest.mark.parametrize("name", ["gloo-iface-missing", "pg-not-initialized", "no-launcher",
                                  "local-rank-required-under-torchrun", "port-in-use"])
def test_failures_caused_now_are_diagnosed(name):
    """Not only the recorded logs: cause the failure again and diagnose what it prints today."""
    scenario = next(s for s in diagnose_corpus.SCENARIOS if s.name == name)
    text, _ = scenario.run(None)
    done = ddpkit("diagnose", "-", "--json", input=text)
    top = json.loads(done.stdout)["findings"][0]
    assert top["category"] == scenario.category
    for key, value in scenario.expect.items():
        assert top["evidence"].get(key) == value


def test_launch_prints_the_diagnosis_of_a_failed_run():
    done = ddpkit("launch", "--nproc-per-node", "2", str(SCRIPTS_DIR / "train_ddp.py"),
                  env={"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert done.returncode == 1
    assert "diagnosis: [nccl_interface_selection]" in done.stderr
    assert "GLOO_SOCKET_IFNAME" in done.stderr.split("diagnosis:")[1]
    js = json.loads(ddpkit("launch", "--json", "--nproc-per-node", "2",
                           str(SCRIPTS_DIR / "train_ddp.py"),
                           env={"GLOO_SOCKET_IFNAME": "nosuch0"}).stdout)
    assert js["diagnosis"][0]["category"] == "nccl_interface_selection"
