"""The statistical fallback of `ddpkit diagnose` (fallback.py): the shipped model is fresh
against its training script, a guess shows the lines behind it and a low confidence, and it never
speaks on a healthy log."""

import subprocess
import sys

from ddpkit.troubleshoot.diagnose import fallback
from ddpkit.troubleshoot.diagnose.kb import signatures
from ddpkit.troubleshoot.diagnose.matcher import analyse, statistical_findings
from ddpkit.troubleshoot.diagnose.scan import Scanner
from tests.conftest import ROOT
from tests.diagnose_corpus import load_corpus

# No rule of the knowledge base matches this (checked below), yet its words are those of
# shared-memory failures.
NO_RULE = """\
$ torchrun --nproc-per-node 4 train.py
[rank2]: error: worker process of the loader failed: posix shm segment too small
[rank2]: the shm size of this container is the default; error creating the segment
"""


def scan_of(text: str) -> Scanner:
    scan = Scanner(signatures())
    scan.feed_all(text.splitlines())
    return scan


def test_the_model_file_is_fresh():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "train_diagnose_fallback.py"),
                           "--check"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_log_without_a_rule_gets_a_ranked_guess_with_its_lines():
    scan = scan_of(NO_RULE)
    report = analyse(scan)  # shipped off: the answer is still `unknown`
    assert [f.category for f in report.findings] == ["unknown"]
    guesses = statistical_findings(scan, enabled=True)
    assert guesses and guesses[0].category == "shared_memory_docker", guesses
    top = guesses[0]
    assert top.kind == "statistical" and top.evidence["statistical"] is True
    assert 0 < top.confidence <= fallback.CAP
    assert "statistical guess" in top.title
    texts = [s["text"] for s in top.evidence["supporting"]]
    assert texts and all(s["text"] in NO_RULE for s in top.evidence["supporting"])
    assert all(w.startswith(("w:", "f:", "x:")) for w in top.evidence["words"])


def test_enabled_the_guesses_come_first_and_unknown_stays(monkeypatch):
    monkeypatch.setattr(fallback, "ENABLED", True)
    report = analyse(scan_of(NO_RULE))
    cats = [f.category for f in report.findings]
    assert cats[0] == "shared_memory_docker" and cats[-1] == "unknown"
    assert report.findings[-1].evidence["decisive_lines"]


def test_healthy_logs_get_nothing_even_enabled(monkeypatch):
    monkeypatch.setattr(fallback, "ENABLED", True)
    # (the healthy folders; a frozen test split's healthy logs are not looked at here)
    healthy = [c for c in load_corpus() if c.path.parent.name in ("success", "healthy")]
    assert len(healthy) >= 30
    for case in healthy:
        assert analyse(scan_of(case.text)).findings == [], case.path.name


def test_a_guess_stays_below_the_rule_findings():
    low = min(s.weight for s in signatures() if s.kind == "cause")
    assert fallback.CAP <= max(low, 0.3)
    model = fallback.load()
    assert all(fallback.confidence(model, p) <= fallback.CAP for p in (0.1, 0.5, 0.9, 1.0))
