"""The knowledge base and the matcher, against real logs: public threads (tests/fixtures/
diagnose/public, with sources), failures caused on this machine (tests/fixtures/diagnose/local,
made by tests/diagnose_corpus.py) and successful runs (no finding allowed)."""

import re

import pytest

from ddpkit.troubleshoot.diagnose import diagnose, diagnose_text
from ddpkit.troubleshoot.diagnose.kb import CATEGORIES, KnowledgeBaseError, parse, signatures
from ddpkit.troubleshoot.diagnose.matcher import diagnose_report, normalise
from tests.conftest import FIXTURES

DIAG = FIXTURES / "diagnose"


def header(text: str, key: str) -> str:
    m = re.search(rf"^# {key}: (.*)$", text, re.M)
    return m.group(1).strip() if m else ""


def body(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines()
                     if not re.match(r"^# (source|category|note|made|expect):", ln))


def causes(lines: list[str]) -> list[str]:
    """The categories diagnose names for these lines, `unknown` (no cause, its lines) left out."""
    return [f.category for f in diagnose(lines) if f.category != "unknown"]


def test_knowledge_base_is_broad_and_sourced():
    sigs = signatures()
    assert len(sigs) >= 60
    assert {s.category for s in sigs} == set(CATEGORIES)
    for s in sigs:
        assert s.source.startswith("https://"), s.id
        assert s.fix and s.explanation and s.title


def test_bad_entries_are_rejected():
    good = {"id": "x", "category": "ssh_failure", "kind": "cause", "title": "t", "patterns": ["a"],
            "explanation": "e", "fix": "f", "source": "https://x"}
    assert parse({"signature": [good]})[0].id == "x"
    for broken in ({**good, "category": "nope"}, {**good, "patterns": ["("]},
                   {**good, "kind": "maybe"}, {**good, "fix": ""}):
        with pytest.raises(KnowledgeBaseError):
            parse({"signature": [broken]})
    with pytest.raises(KnowledgeBaseError):
        parse({"signature": [good, good]})


@pytest.mark.parametrize("raw, text, where", [
    ("\x1b[31mnode1:3  | RuntimeError: boom\x1b[0m", "RuntimeError: boom", "node1:3"),
    ("[rank2]: RuntimeError: boom", "RuntimeError: boom", "rank 2"),
    ("[default1]:[rank1]: Traceback (most recent call last):", "Traceback (most recent call last):",
     "rank 1"),
    ("[1,3]<stderr>:Horovod has been shut down", "Horovod has been shut down", "rank 3"),
    ("0: NCCL WARN x", "NCCL WARN x", "rank 0"),
    ("node0:-  | E1130 torchrun says", "E1130 torchrun says", "node0"),
    ("plain line", "plain line", ""),
])
def test_normalise_prefixes(raw, text, where):
    line = normalise(raw, 1)
    assert line.text == text and line.where == where


def corpus(kind):
    return sorted((DIAG / kind).glob("*.log"))


# Public logs whose own text does not hold the evidence, so a rule for them would only fit that
# one log (kept short; each is still measured by benchmarks/diagnose_eval.py).
# Logs whose evidence has two readings that a family decision ranks the other way round: the
# thread's category must still be offered.
SECOND_READING = {
    # a framework symbol (c10/caffe2) undefined in Horovod's extension: 4 of 5 such threads were
    # fixed by matching the framework's release (version_mismatch first), this one by
    # reinstalling Open MPI and then Horovod
    "horovod-torch-undefined-symbol-caffe2.log",
}
KNOWN_MISSES = {
    # a Python REPL where a cuda:0 -> cuda:1 copy prints wrong numbers; no error, no NCCL line
    "pytorch-gpu-to-gpu-copy-silent-zeros-iommu.log",
    # NCCL INFO start-up lines, then silence (IOMMU, NCCL_P2P_DISABLE only in thread); the
    # thread does not say "hung" in so many words, so it is not read with --hung
    "pytorch-a6000-docker-lightning-ddp-stops-iommu.log",
    # NaNs that the script prints for one replica; no error, no NCCL line (ACS in the thread)
    "tf-mirroredstrategy-a5000-nan-after-first-step-acs.log",
    # c10d connects to the master, then silence; the Istio sidecar is named only in the thread
    # (read with --hung: one node's shape, so a P2P hang ranks first)
    "pytorch-kubeflow-istio-sidecar-gloo-hang.log",
    # four numbers per rank (size, rank, local rank) printed by the script; no message at all
    "horovod-ray-executor-local-rank-all-zero.log",
    # a bare "unhandled system error" at the first broadcast, the words of the containers whose
    # /dev/shm ran out (shared memory ranks first, the interface second); the docker bridge
    # address is named only in the thread
    "insightface-arcface-docker-bridge-ip-nccl.log",
    # a bare "unhandled cuda error" from nccl-tests and nothing else: a release that does not
    # fit ranks first, memory second; the job holding the GPUs' memory is named only in the
    # thread
    "sichek-nccltest-gpu-memory-held.log",
}


@pytest.mark.parametrize("path", corpus("public"), ids=lambda p: p.stem)
def test_public_logs_top1_category(path):
    text = path.read_text(encoding="utf-8", errors="replace")
    # as its user would ask: --hung where the thread says the run hung ("# hung: yes")
    findings = diagnose_report(body(text).splitlines(), hung=header(text, "hung") == "yes").findings
    if path.name in KNOWN_MISSES and (not findings
                                      or findings[0].category != header(text, "category")):
        pytest.xfail("known miss: the log does not hold its evidence")
    if header(text, "category") == "none":  # a healthy run posted in a thread
        assert findings == [], [f.id for f in findings[:3]]
        return
    assert findings, "nothing found"
    if path.name in SECOND_READING:
        assert header(text, "category") in [f.category for f in findings[:3]]
        return
    assert findings[0].category == header(text, "category"), [f.id for f in findings[:3]]


@pytest.mark.parametrize("path", [p for p in corpus("local") if "success" not in p.name],
                         ids=lambda p: p.stem)
def test_failures_caused_here_are_named_with_evidence(path):
    text = path.read_text()
    findings = diagnose_text(text)
    assert findings and findings[0].category == header(text, "category"), \
        [f.id for f in findings[:3]]
    for pair in header(text, "expect").split():
        key, _, value = pair.partition("=")
        assert findings[0].evidence.get(key) == value, findings[0].evidence
    assert findings[0].fix and findings[0].evidence["text"]


@pytest.mark.parametrize("path", corpus("success") + [p for p in corpus("local") if "success" in p.name],
                         ids=lambda p: p.stem)
def test_successful_runs_yield_no_finding(path):
    assert diagnose_text(path.read_text()) == []


def test_the_root_cause_beats_the_echo_on_every_rank():
    log = [f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for "
           "600010 milliseconds before timing out." for r in range(8)]
    log.insert(0, "[rank3]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                  "2.00 GiB. GPU 3 has a total capacity of 79.11 GiB")
    findings = diagnose(log)
    assert findings[0].category == "oom_cuda_error"
    assert findings[0].evidence["where"] == "rank 3"
    assert any(f.category == "nccl_timeout_or_desync" for f in findings[1:])
    assert findings[0].confidence > findings[-1].confidence


def test_unknown_log_has_no_finding():
    assert diagnose(["all good", "epoch 3 loss 0.1"]) == []


def test_held_out_public_logs_accuracy():
    """46 logs from threads that no signature cites, gathered after the knowledge base was
    written (tests/fixtures/diagnose/heldout). First look: 35/46; after one round of general
    fixes: 41/46. Each miss is listed when this fails."""
    paths = corpus("heldout")
    misses = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        findings = diagnose_text(body(text))
        got = findings[0].category if findings else "unknown"
        if got != header(text, "category"):
            misses.append(f"{path.stem}: {got}")
    assert len(paths) >= 40
    assert 1 - len(misses) / len(paths) >= 0.85, misses


# ---- issue 12: never an empty answer, the script's own errors, evidence by family ------------
from ddpkit.troubleshoot.diagnose.rundir import diagnose_dir  # noqa: E402
from tests.diagnose_corpus import load_corpus  # noqa: E402

WATCHDOG = ("[rank{r}]:[E1130 12:40:00.1 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")


def test_a_script_error_is_named_with_rank_exception_and_line():
    text = (DIAG / "local" / "script-keyerror-rank1.log").read_text()
    top = diagnose_text(text)[0]
    assert top.category == "script_error"
    assert "rank 1" in top.title and "KeyError: 'image'" in top.title
    assert "keyerror_rank1.py:10" in top.title and "waiting for it" in top.title


def test_the_ranks_exception_beats_the_nccl_watchdog_that_follows_it():
    log = ["[rank1]:Traceback (most recent call last):",
           '[rank1]:  File "/work/train.py", line 57, in <module>',
           '[rank1]:    x = batch["image"]',
           "[rank1]:KeyError: 'image'"] + [WATCHDOG.format(r=r) for r in (0, 2, 3)]
    findings = diagnose(log)
    assert findings[0].category == "script_error"
    assert "rank 1 raised KeyError: 'image' at train.py:57" in findings[0].title
    watchdog = next(f for f in findings if f.category == "nccl_timeout_or_desync")
    assert watchdog.confidence < findings[0].confidence


def test_confidence_follows_the_evidence():
    alone = diagnose([WATCHDOG.format(r=r) for r in range(4)])[0]
    assert alone.category == "nccl_timeout_or_desync" and alone.confidence >= 0.6
    topo = diagnose(["\tGPU0\tGPU1\tCPU Affinity", "GPU0\t X \tPXB\t0-27", "GPU1\tPXB\t X \t0-27"])
    assert topo[0].category == "p2p_acs_iommu" and topo[0].confidence < 0.5
    both = diagnose(["RuntimeError: Address already in use"] + [WATCHDOG.format(r=1)])
    assert both[0].category == "port_in_use_or_firewall"
    assert both[0].confidence > both[1].confidence


def test_unknown_is_never_an_empty_answer():
    log = ["$ torchrun --nproc-per-node 2 train.py", "epoch 1 step 10 loss 0.4",
           "[rank1]: something odd happened: frobnicator failed with status 7",
           "[rank0]: still waiting"]
    report = diagnose_report(log)
    assert [f.category for f in report.findings] == ["unknown"]
    whys = {d["why"] for d in report.decisive}
    assert "command" in whys and "first error of rank 1" in whys
    assert any(w.startswith("last lines") for w in whys)
    assert any("ddpkit check" in c for c in report.next_checks)
    assert any("ddpkit stacks" in c for c in report.next_checks)
    assert diagnose_report(["epoch 1 loss 0.4", "done"]).findings == []


def test_a_log_without_an_error_still_gets_its_last_lines_and_the_checks_for_a_hang(capsys):
    """A hang prints nothing: its log has no error line. The answer is not empty: the log's
    last lines and the checks for a silent run, with no finding (healthy logs stay clean)."""
    from ddpkit.cli.diagnose import show

    log = ["NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>", "NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC",
           "Epoch 0: 12%|#2        | 120/1000"]
    report = diagnose_report(log)
    assert report.findings == [] and report.to_dict()["category"] == "none"
    assert report.to_dict()["decisive_lines"][-1]["text"].startswith("Epoch 0: 12%")
    assert any("ddpkit stacks" in c for c in report.to_dict()["next_checks"])
    show(report)
    out = capsys.readouterr().out
    assert "no failure in this log" in out and "Epoch 0: 12%" in out and "ddpkit stacks" in out


@pytest.mark.parametrize("category, log", [
    ("launcher_misuse", ["ERROR: Could not consume arg: --local_rank=3", "Usage: train.py"]),
    ("launcher_misuse", ["usage: train.py [-h] [--local_rank LOCAL_RANK] [--cfg CFG]",
                         "train.py: error: unrecognized arguments: --local-rank=0"]),
    ("launcher_misuse", ['  File "/w/utils/dist.py", line 22, in setup_dist',
                         '    th.cuda.set_device(int(os.environ["LOCAL_RANK"]))', "'LOCAL_RANK'"]),
    ("version_mismatch", ["RuntimeError: The NVIDIA driver on your system is too old (found "
                          "version 10010). Please update your GPU driver"]),
    ("nccl_timeout_or_desync", ["RuntimeError: [../third_party/gloo/gloo/transport/tcp/"
                                "unbound_buffer.cc:81] Timed out waiting 1800000ms for recv "
                                "operation to complete"]),
    ("nccl_timeout_or_desync", ["frame #2: c10d::ProcessGroupNCCL::watchdogHandler() + 0x222",
                                "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x10f"]),
    ("p2p_acs_iommu", ["# Using devices", "#  Rank  0 Group  0 Pid 1 on host device  0 [0x1a]",
                       "#       size         count      type   redop    root     time   algbw",
                       "#        (B)    (elements)                               (us)  (GB/s)"]),
    ("horovod_specific", ["ssh: Could not resolve hostname localhost:4: Name or service not "
                          "known", "ORTE was unable to reliably start one or more daemons."]),
    ("p2p_acs_iommu", ["node1:1:2 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion"
                       " from peer 10.0.0.2<3> with error 4, opcode 0, len 0, vendor err 81"]),
])
def test_issue_12_evidence_kinds(category, log):
    findings = diagnose(log)
    assert findings and findings[0].category == category, [f.id for f in findings]
    assert findings[0].evidence["supporting"]


# Each family in the wording of other releases than the dev log it was learnt from.
@pytest.mark.parametrize("sig, log", [
    ("horovodrun-mpi-not-detected", [
        "Open MPI/Spectrum MPI/MPICH not found in output of mpirun --version.",
        "Exception: horovodrun convenience script does not find an installed MPI."]),
    ("horovod-build-missing-dependency", [
        "  Building wheel for horovod (setup.py): finished with status 'error'",
        "    Could NOT find NCCL (missing: NCCL_INCLUDE_DIR NCCL_LIBRARY)"]),
    ("horovod-build-framework-unsupported", [
        "  INFO: Unable to build PyTorch plugin, will skip it.",
        "  error: None of TensorFlow, PyTorch, or MXNet plugins were built. See errors above."]),
    ("horovod-build-cxx-standard", [
        "  /x/torch/include/c10/util/C++17.h:13:2: error: #error You need C++17 to compile PyTorch",
        "  ERROR: Failed building wheel for horovod"]),
    ("horovod-build-failed", ["  ERROR: Failed building wheel for horovod", "Failed to build horovod"]),
    ("horovod-extension-missing-library", [
        '  File "/x/site-packages/horovod/torch/__init__.py", line 5, in <module>',
        "ImportError: libmpi.so.40: cannot open shared object file: No such file or directory"]),
    ("openmpi-mixed-installations", [
        "mpirun: symbol lookup error: /usr/lib/libmpi.so.40: undefined symbol: opal_list_item_t_class"]),
    ("c10d-client-host-unreachable", [
        "torch.distributed.DistNetworkError: The client socket has failed to connect to "
        "[node0]:29500 (errno: 101 - Network is unreachable)."]),
    ("c10d-client-connect-timeout", [
        '    store = TCPStore(result.hostname, result.port, world_size, start_daemon)',
        "RuntimeError: connect() timed out."]),
    ("nccl-connect-loopback", [
        "node1:1:1 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
        "127.0.1.1<43215> failed : Connection refused"]),
    ("nccl-bootstrap-on-docker-or-lo", [
        "h:1:1 [0] NCCL INFO Bootstrap: Using lo:127.0.0.1<0>",
        "RuntimeError: NCCL error in: x, unhandled system error"]),
    ("multinode-loopback-master-address", [
        "torchrun --nnodes=2 --node_rank=1 --master_addr=127.0.0.1 --master_port=29500 train.py"]),
    ("rdzv-endpoint-without-port", [
        "torchrun --nnodes=2 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=node0 t.py"]),
    ("nccl-config-struct-mismatch", ["Invalid config cgaClusterSize attribute value 0"]),
    ("nccl-topology-path-bug", ["h:1:2 [0] NCCL WARN Could not find NET with id 0"]),
    ("setpci-acs-control-enabled", ["$ sudo setpci -v -s 0000:40:01.1 ECAP_ACS+0x6.w",
                                    "0000:40:01.1 (cap 000d @270) @276 = 001d"]),
])
def test_families_widened_from_the_dev_logs(sig, log):
    findings = diagnose(log)
    assert findings and findings[0].id == sig, [f.id for f in findings]


@pytest.mark.parametrize("log", [
    ["torchrun --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=10.0.0.1:29400 train.py"],
    ["torchrun --nnodes=1 --master_addr=127.0.0.1 train.py"],
    ["h:1:1 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>", "h:1:1 [0] NCCL INFO Init COMPLETE"],
    ["NCCL INFO NET/Plugin : dlerror=libnccl-net.so: cannot open shared object file: No such "
     "file or directory", "import horovod.torch as hvd"],
])
def test_widened_families_stay_quiet_on_healthy_lines(log):
    assert diagnose(log) == []


# The families learnt from the public batch of issue 12, in other wordings than its dev logs.
@pytest.mark.parametrize("sig, log", [
    ("accelerate-state-not-distributed", [
        "Distributed environment: DistributedType.NO", "Num processes: 1", "Process index: 0"]),
    ("ddp-init-broadcast-frames", [
        "Traceback (most recent call last):",
        '  File "/x/torch/nn/parallel/distributed.py", line 798, in __init__',
        "    _verify_param_shape_across_processes(self.process_group, parameters)",
        '  File "/x/torch/distributed/utils.py", line 269, in _verify_param_shape_across_processes']),
    ("nccl-cpu-tensor", ["[rank1]: RuntimeError: No backend type associated with device type cpu"]),
    ("nccl-cpu-tensor", ["[rank0]: ValueError: Tensors must be CUDA and dense"]),
    ("nccl-cpu-tensor", ["    dist._broadcast_coalesced(self.process_group, tensors, buffer_size)",
                         "RuntimeError: Tensors must be CUDA and dense"]),
    ("nccl-system-error-vllm-one-host", [
        "(VllmWorker rank=1 pid=233) ERROR 05-02 10:01:12 [multiproc_executor.py:470] "
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"]),
    ("horovod-gloo-iface-not-found", [
        "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
        "  what():  [enforce fail at /tmp/pip-install-k2/horovod_5e1/third_party/gloo/gloo/"
        "transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: ens3"]),
    ("horovod-mpirun-probe-failed", [
        "Was unable to run mpirun --version:",
        "FileNotFoundError: [Errno 2] No such file or directory: 'mpirun'"]),
    ("horovod-build-compile-error", [
        "  /tmp/pip-install-q/horovod_ab/horovod/common/ops/cuda/cuda_kernels.cu(41): error: "
        'identifier "__hadd" is undefined',
        "  ERROR: Failed building wheel for horovod"]),
    ("horovod-native-crash-frames", [
        "[node1:04211] *** Process received signal ***",
        "[node1:04211] [ 3] /usr/lib/python3/dist-packages/horovod/tensorflow/mpi_lib.cpython-38"
        "-x86_64-linux-gnu.so(+0x9a1f2)[0x7f3a1c09a1f2]"]),
    ("sshd-privsep-denied", ["Jul 29 12:32:38 w1 sshd[242]: fatal: Missing privilege separation "
                             "directory: /run/sshd"]),
    ("sshd-privsep-denied", ['chroot("/var/empty/sshd"): Operation not permitted [preauth]']),
    ("two-nccl-versions", [
        "ii  libnccl2      2.18.3-1+cuda12.2   amd64   NVIDIA Collective Communication Library",
        "ii  libnccl-dev   2.21.5-1+cuda12.4   amd64   NVIDIA Collective Communication Library"]),
    ("two-nccl-versions", ["node0:0 | NCCL version 2.18.1+cuda12.1",
                           "node1:4 | NCCL version 2.21.5+cuda12.4"]),
    ("horovod-stalled-tensors", [
        "[2023-01-01 00:00:00.000000: W /tmp/horovod/common/stall_inspector.cc:107] One or more "
        "tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
        "waiting for remainder of ranks for more than 60 seconds."]),
    ("nccl-tests-stopped-after-header", [
        "   Rank  0 uses device  0 [0x04] Tesla K80",
        "      bytes             N    type      op     time  algbw  busbw      res"]),
])
def test_families_widened_from_the_public_batch(sig, log):
    findings = diagnose(log)
    assert findings and findings[0].id == sig, [f.id for f in findings]


def test_a_horovod_stall_is_a_desync_and_a_missing_submodule_is_the_scripts():
    stall = diagnose(["Stalled ops:", "grad_0 [missing ranks: 1]"])
    assert stall[0].category == "nccl_timeout_or_desync"
    missing = diagnose(["Traceback (most recent call last):",
                        '  File "/w/finetune.py", line 3, in <module>',
                        "    from mytrainer.deepspeed_utils import HfDeepSpeedConfig",
                        "ModuleNotFoundError: No module named 'mytrainer.deepspeed_utils'"])
    assert missing[0].category == "script_error"
    # a module a framework's release removed (transformers.deepspeed, gone after 4.45): its release
    removed = diagnose(["Traceback (most recent call last):",
                        '  File "/w/finetune.py", line 3, in <module>',
                        "    from transformers.deepspeed import HfDeepSpeedConfig",
                        "ModuleNotFoundError: No module named 'transformers.deepspeed'"])
    assert (removed[0].category, removed[0].id) == ("version_mismatch", "framework-name-missing-in-release")


@pytest.mark.parametrize("log", [
    ["Distributed environment: MULTI_GPU  Backend: nccl", "Num processes: 8", "Process index: 3"],
    ["      bytes             N    type      op     time  algbw  busbw      res",
     "    1048576        262144   float     sum    0.310   3.38   5.92    0e+00"],
    ["node0:0 | NCCL version 2.21.5+cuda12.4", "node1:4 | NCCL version 2.21.5+cuda12.4",
     "lrwxrwxrwx 1 root root 17 /usr/lib/libnccl.so.2 -> libnccl.so.2.21.5",
     "ii  libnccl2      2.21.5-1+cuda12.4   amd64   NVIDIA Collective Communication Library"],
    ["(VllmWorkerProcess pid=18565) INFO 11-11 14:17:08 pynccl.py:69] vLLM is using nccl==2.21.5",
     "(VllmWorkerProcess pid=18565) INFO 11-11 14:17:08 utils.py:960] Found nccl from library "
     "libnccl.so.2"],
    ["Server listening on 0.0.0.0 port 22.", "Accepted publickey for root from 10.0.0.2 port "
     "51122 ssh2: RSA SHA256:abc"],
    ["[2024-01-01 00:00:00.1: D /tmp/pip-install-e/horovod_7/horovod/common/gloo/gloo_context.h"
     ":64] Gloo context enabled."],
])
def test_public_batch_families_stay_quiet_on_healthy_lines(log):
    assert diagnose(log) == []


def test_the_gate_never_changes_an_answer():
    """The scanner reads only lines holding a word some regex needs; on every corpus log its
    answer must equal reading every line (read as the user would: --hung where the run hung,
    so the hang facts are compared too)."""
    for case in load_corpus():
        lines = case.text.splitlines()
        fast = diagnose_report(lines, hung=case.hung)
        full = diagnose_report(lines, hung=case.hung, gate=False)
        assert [(f.id, f.first_line) for f in fast.findings] == \
            [(f.id, f.first_line) for f in full.findings], case.path.name
        assert fast.decisive == full.decisive, case.path.name


# Healthy logs that hold an error line of their own: `unknown` with its lines, never a cause.
HEALTHY_WITH_AN_ERROR_LINE = {
    # the user's own smoke test prints "❌ fi_info check failed: ... exit status 127" (a tool
    # that is not on the node); RCCL then falls back to sockets and works
    "web-lumi-rccl-2.20.5-smoke-plugin-missing.log",
    # the trainer's own "[E] Error getting memory stats: name 'device_memory_monitor' is not
    # defined", caught and logged on every step of an FSDP run that goes on
    "hpcdoc-saforem2-polaris-fsdp-llama3-8b-2node-ok.log",
}


def test_healthy_logs_yield_nothing():
    healthy = [c for c in load_corpus() if c.split == "healthy"]
    assert len(healthy) >= 100
    for case in healthy:
        found = [f.category for f in diagnose_report(case.text.splitlines()).findings]
        if case.path.name in HEALTHY_WITH_AN_ERROR_LINE:
            assert found == ["unknown"], case.path.name
        else:
            assert found == [], (case.path.name, found)


def test_run_directory_names_the_first_rank_and_host(tmp_path):
    (tmp_path / "summary.json").write_text(
        '{"nodes": [{"host": "node0", "ranks": [0, 1]}, {"host": "node1", "ranks": [2, 3]}]}')
    (tmp_path / "rank0.log").write_text("step 1\n" + WATCHDOG.format(r=0)[7:] + "\n")
    (tmp_path / "rank1.log").write_text("step 1\n" + WATCHDOG.format(r=1)[7:] + "\n")
    (tmp_path / "rank2.log").write_text("step 1\nTraceback (most recent call last):\n"
                                        '  File "/w/train.py", line 9, in <module>\n'
                                        "ZeroDivisionError: division by zero\n")
    (tmp_path / "rank3.log").write_text("step 1\n")
    (tmp_path / "node0.log").write_text("I1130 12:00:00.000 launching\n")
    report = diagnose_dir(tmp_path)
    top = report.findings[0]
    assert top.category == "script_error" and top.evidence["where"] == "node1:2"
    assert "rank 2 (node1) raised ZeroDivisionError" in top.title
    assert report.first_failure["source"] == "rank2.log" and report.first_failure["files"] == 5


def test_no_regex_is_gated_on_a_word_every_log_has():
    """A gate word found on most lines of a healthy log would make the scanner read every line
    one by one (benchmarks/diagnose_speed.py would show it); words like these must not gate.
    ("error" may: lines with it are read one by one anyway, for the decisive lines.)"""
    from ddpkit.troubleshoot.diagnose.scan import Scanner

    words = Scanner(signatures()).words
    assert not words & {"torch", "rank", "nccl", "info", "process", "cuda", "warning", "epoch"}


# Families every distributed user meets, each in the wording of more than one release/tool.
@pytest.mark.parametrize("category, log", [
    # the launcher's --local_rank refused by the script's own argument parser, in each library
    ("launcher_misuse", ["absl.flags._exceptions.UnrecognizedFlagError: Unknown command line "
                         "flag 'local_rank'"]),
    ("launcher_misuse", ["Error: No such option: --local_rank"]),
    ("launcher_misuse", ["train.py: error: Unrecognized arguments: --local-rank=0"]),
    ("launcher_misuse", ["ValueError: Some specified arguments are not used by the "
                         "HfArgumentParser: ['--local-rank=0']"]),
    ("ddp_usage_error", ["AttributeError: 'DistributedDataParallel' object has no attribute 'backbone'"]),
    ("ddp_usage_error", ["AttributeError: 'DataParallel' object has no attribute 'generate'"]),
    ("ddp_usage_error", ['RuntimeError: Error(s) in loading state_dict for ResNet:',
                         '\tMissing key(s) in state_dict: "conv1.weight", "bn1.weight".',
                         '\tUnexpected key(s) in state_dict: "module.conv1.weight".']),
    ("ddp_usage_error", ["KeyError: 'unexpected key \"module.features.conv0.weight\" in state_dict'"]),
    ("ddp_usage_error", ["RuntimeError: one of the variables needed for gradient computation has "
                         "been modified by an inplace operation: [torch.cuda.FloatTensor [768]] "
                         "is at version 3; expected version 2 instead."]),
    ("version_mismatch", ["AttributeError: module 'torch.distributed' has no attribute '_all_gather_base'"]),
    ("version_mismatch", ["ImportError: cannot import name 'container_abcs' from 'torch._six'"]),
    ("version_mismatch", ["ModuleNotFoundError: No module named 'torch.distributed.elastic'"]),
    ("launcher_misuse", ["ValueError: No slot '2' specified on host 'localhost'"]),
    ("rendezvous_master_unreachable", ["cmd = /usr/bin/python -u -m deepspeed.launcher.launch "
                                       "--world_info=eyJ --master_addr= --master_port=29500 train.py"]),
    # a torch method the installed release lacks, an extension built for another torch, a
    # toolkit that is not torch's CUDA (torch's and DeepSpeed's wordings)
    ("version_mismatch", ["AttributeError: 'ResNet' object has no attribute 'get_submodule'"]),
    ("version_mismatch", ["ImportError: /opt/venv/lib/python3.10/site-packages/flash_attn_2_cuda."
                          "cpython-310-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"]),
    ("version_mismatch", ["RuntimeError: The detected CUDA version (12.1) mismatches the version "
                          "that was used to compile PyTorch (11.8). Please make sure to use the "
                          "same CUDA versions."]),
    ("version_mismatch", ["deepspeed.ops.op_builder.builder.CUDAMismatchException: >- DeepSpeed Op "
                          "Builder: Installed CUDA version 11.4 does not match the version torch "
                          "was compiled with 12.1, unable to compile cuda/cpp extensions"]),
    ("oom_cuda_error", ["RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
                        "`cublasCreate(handle)`"]),
    ("horovod_specific", ["terminate called after throwing an instance of 'gloo::IoException'",
                          "  what():  [horovod/common/gloo/http_store.cc:57] Wait timeout after 60 "
                          "seconds for key(s): 3."]),
    ("shared_memory_docker", ["[1701234567.123456] [worker-0:88:0] mm_iface.c:812 UCX ERROR "
                              "mm_iface failed to allocate receive FIFO"]),
    ("shared_memory_docker", ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled "
                              "system error, NCCL version 2.7.8"]),
    ("nccl_interface_selection", ["node1:311:311 [0] NCCL INFO NET/Socket : 0 interfaces found",
                                  "node1:311:311 [0] transport/net_socket.cu:39 NCCL WARN "
                                  "NET/Socket : no interface found"]),
    ("nccl_interface_selection", [
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/"
        "pair.cc:144] timed out connecting: SO_ERROR: Connection timed out, "
        "remote=[10.0.0.2]:39145 (rank=1, size=2, local=[127.0.1.1]:41234)"]),
    ("nccl_interface_selection", ["export NCCL_SOCKET_IFNAME=ens3",
                                  "torch.distributed.DistBackendError: NCCL error in: "
                                  "ProcessGroupNCCL.cpp:1970, remote process exited or there was "
                                  "a network error, NCCL version 2.20.5"]),
    # ssh's own messages in a Chinese locale; Python's spelling of a busy port and of a name
    # that does not resolve; torchrun's argument parser; sshd closing at once; the NCCL id wait
    ("ssh_failure", ["ssh: connect to host 192.168.1.12 port 22: 没有到主机的路由"]),
    ("ssh_failure", ["kex_exchange_identification: read: Connection reset by peer"]),
    ("port_in_use_or_firewall", ["OSError: [Errno 98] Address already in use"]),
    ("rendezvous_master_unreachable", ["socket.gaierror: [Errno -2] Name or service not known"]),
    ("launcher_misuse", ["torchrun: error: the following arguments are required: "
                         "training_script, training_script_args"]),
    ("rendezvous_master_unreachable", [
        '  File "/opt/venv/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line '
        '176, in _create_c10d_store', "ConnectionRefusedError: [Errno 111] Connection refused"]),
    ("rendezvous_master_unreachable", [
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 1, "
        "for key: store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)"]),
    ("launcher_misuse", ["bash: line 1: torchrun: command not found"]),
    ("launcher_misuse", ["bash: deepspeed: 未找到命令"]),
    ("version_mismatch", ["ImportError: libcudart.so.11.0: cannot open shared object file: No "
                          "such file or directory"]),
    ("shared_memory_docker", ["RuntimeError: DataLoader worker (pid(s) 1234, 1235) exited "
                              "unexpectedly"]),
    ("p2p_acs_iommu", ["# Out of bounds values : 24 FAILED", "# Avg bus bandwidth    : 3.1"]),
    ("port_in_use_or_firewall", ["OSError: [Errno 98] error while attempting to bind on address "
                                 "('0.0.0.0', 29500): address already in use"]),
    ("nccl_timeout_or_desync", ["[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat "
                                "monitor timed out! Process will be terminated after dumping "
                                "debug info. workMetaList_.size()=1"]),
    ("version_mismatch", ["RuntimeError: Detected that PyTorch and torchvision were compiled with "
                          "different CUDA major versions. PyTorch has CUDA Version=11.8 and "
                          "torchvision has CUDA Version=12.1."]),
    ("version_mismatch", ["AssertionError: Torch not compiled with CUDA enabled"]),
    ("version_mismatch", ["RuntimeError: Distributed package doesn't have NCCL built in"]),
    ("duplicate_gpu_or_wrong_device", ["RuntimeError: ProcessGroupNCCL is only supported with GPUs, "
                                       "no GPUs found!"]),
    ("shared_memory_docker", ["RuntimeError: unable to mmap 1048576 bytes from file "
                              "</torch_3432_1043987521_0>: Cannot allocate memory (12)"]),
    ("ddp_usage_error", ["RuntimeError: Modules with uninitialized parameters can't be used with "
                         "`DistributedDataParallel`. Run a dummy forward pass"]),
    ("ddp_usage_error", ["RuntimeError: Your training graph has changed in this iteration, e.g., "
                         "one parameter is used in first iteration, but then got unused in the "
                         "second iteration. this is not compatible with static_graph set to True."]),
    ("p2p_acs_iommu", ["node1:1:1 [0] NCCL INFO Channel 00 : 0[1000] -> 1[2000] via P2P/IPC",
                       "node1:1:1 [0] misc/strongstream.cc:53 NCCL WARN Cuda failure 'operation "
                       "not supported'"]),
    ("p2p_acs_iommu", ["[  512.345] DMAR: [DMA Read NO_PASID] Request device [41:00.0] fault "
                       "addr 0xfe000000 [fault reason 0x06] PTE Read access is not set"]),
    ("script_error", ["$ python -m trainer.main", "/usr/bin/python3: No module named trainer.main"]),
    # Open MPI's TCP transport on a docker bridge; an NCCL older than the GPU; nccl-tests built
    # without MPI under mpirun (one summary per process)
    ("nccl_interface_selection", ["[node2][[4711,1],1][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint"
                                  "_complete_connect] connect() to 172.17.0.1 failed: Connection "
                                  "refused (111)"]),
    ("version_mismatch", ["node1:4766:4780 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds "
                          "device/fn maxSharedMem 79856"]),
    ("launcher_misuse", ["mpirun -H node1,node2 -np 2 ./build/all_reduce_perf -b 8 -e 128M -g 1",
                         "# Avg bus bandwidth    : 10.512", "# Avg bus bandwidth    : 10.498"]),
    ("launcher_misuse", ["ValueError: Some specified arguments are not used by the "
                         "HfArgumentParser: ['--local-rank=0']"]),
    ("ssh_failure", ["Bad owner or permissions on /root/.ssh/config"]),
    ("ssh_failure", ["@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @"]),
    ("ssh_failure", ["ssh_exchange_identification: read: Connection reset by peer"]),
    ("shared_memory_docker", ["RuntimeError: Too many open files. Communication with the workers "
                              "is no longer possible. Please increase the limit using `ulimit -n`"]),
    ("nccl_timeout_or_desync", ["RuntimeError: [3] is setting up NCCL communicator and retrieving "
                                "ncclUniqueId from [0] via c10d key-value store by key '0', but "
                                "store->get('0') got error: Socket Timeout"]),
    # the launcher was the deepspeed one, the GPUs were picked with CUDA_VISIBLE_DEVICES
    ("launcher_misuse", ["Detected CUDA_VISIBLE_DEVICES=3: setting --include=localhost:3",
                         "Traceback (most recent call last):",
                         '  File "/opt/venv/bin/deepspeed", line 6, in <module>',
                         "ValueError: No slot '3' specified on host 'localhost'"]),
    ("launcher_misuse", ["export CUDA_VISIBLE_DEVICES=4,5",
                         "deepspeed --num_gpus 2 finetune.py --deepspeed ds.json"]),
])
def test_common_families_in_several_wordings(category, log):
    findings = diagnose(log)
    assert findings and findings[0].category == category, [f.id for f in findings]


def test_the_wrapper_families_stay_quiet_on_healthy_lines():
    log = ["model = DDP(model, device_ids=[rank], broadcast_buffers=False)",
           "loaded checkpoint: stripped 'module.' prefix from 312 keys",
           "MASTER_ADDR=10.0.0.1 MASTER_PORT=29500 torchrun --nnodes 2 train.py",
           "Detected CUDA_VISIBLE_DEVICES=0,1: setting --include=localhost:0,1"]
    assert diagnose(log) == []


# A traceback the log ends in the middle of says where that rank was.
CUT_IN_INIT = ["Traceback (most recent call last):",
               '  File "train.py", line 12, in <module>',
               '    dist.init_process_group("nccl")',
               '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py",'
               ' line 1141, in init_process_group',
               "    store, rank, world_size = next(rendezvous_iterator)"]


def test_a_traceback_cut_off_in_the_rendezvous_names_the_rendezvous():
    findings = diagnose(["torchrun --nnodes 2 --rdzv-endpoint node0:29400 train.py", *CUT_IN_INIT])
    assert findings[0].category == "rendezvous_master_unreachable", [f.id for f in findings]
    assert findings[0].evidence["line"] == 5  # the last frame, not a made-up line
    assert "init_process_group" in findings[0].evidence["text"]


def test_the_same_cut_traceback_under_plain_python_is_a_missing_launcher():
    findings = diagnose(["$ python train.py --epochs 3", *CUT_IN_INIT])
    assert findings[0].category == "launcher_misuse", [f.id for f in findings]
    assert "ddpkit launch --nproc-per-node 1" in findings[0].fix


def test_a_traceback_that_ends_in_its_exception_is_not_cut():
    log = CUT_IN_INIT + ["ValueError: Error initializing torch.distributed using env:// "
                         "rendezvous: environment variable RANK expected, but not set"]
    assert all(f.id != "traceback-cut-in-rendezvous" for f in diagnose(log))


def test_a_script_path_that_does_not_exist_is_a_script_error():
    findings = diagnose(["torchrun --nproc_per_node 2 src/trian.py",
                         "/usr/bin/python3: can't open file '/work/src/trian.py': [Errno 2] No "
                         "such file or directory",
                         "E1201 10:00:00.000 1460 api.py:869] failed (exitcode: 2) local_rank: 0 "
                         "(pid: 1464) of binary: /usr/bin/python3"])
    assert findings[0].category == "script_error", [f.id for f in findings]
    assert "/work/src/trian.py" in findings[0].title
    assert "path" in findings[0].fix


def test_a_name_that_fails_to_resolve_while_downloading_is_not_the_rendezvous():
    log = ["requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', "
           "port=443): Max retries exceeded with url: /bert-base-uncased/resolve/main/config.json",
           "socket.gaierror: [Errno -3] Temporary failure in name resolution"]
    assert all(f.category != "rendezvous_master_unreachable" for f in diagnose(log))


def test_a_refused_connection_outside_torch_distributed_is_not_the_rendezvous():
    log = ['  File "fetch.py", line 3, in <module>',
           "ConnectionRefusedError: [Errno 111] Connection refused"]
    assert all(f.category != "rendezvous_master_unreachable" for f in diagnose(log))


def test_an_invalid_ordinal_names_the_device_and_the_process_count():
    """More ranks than GPUs: one thread files it under the device, the next under the launcher;
    both readings are offered, the device first."""
    cats = [f.category for f in diagnose(["RuntimeError: CUDA error: invalid device ordinal"])]
    assert cats[:2] == ["duplicate_gpu_or_wrong_device", "launcher_misuse"], cats


def test_a_system_error_beside_a_refused_connection_is_not_shared_memory():
    findings = diagnose(["node1:77:90 [0] misc/socket.cc:484 NCCL WARN Net : Connect to "
                         "10.0.0.2<43117> failed : Connection refused",
                         "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled "
                         "system error, NCCL version 2.7.8"])
    assert findings and findings[0].category != "shared_memory_docker", [f.id for f in findings]


# Families read from unseen13's first look (pip builds, signals, Slurm scripts, old torch).
@pytest.mark.parametrize("category, log", [
    ("launcher_misuse", ['AssertionError: MPI world size 16 does not match torch world size 8"']),
    ("horovod_specific", ["mpiexec noticed that process rank 0 with PID 0 on node matrix exited on "
                          "signal 4 (Illegal instruction: 4)."]),
    ("horovod_specific", ["mpirun noticed that process rank 1 with PID 4242 on node n2 exited on "
                          "signal 4 (Illegal instruction)."]),
    ("version_mismatch", ["RuntimeError: ProcessGroupNCCL does not support barrier"]),
    ("version_mismatch", ["RuntimeError: ProcessGroupNCCL does not support scatter"]),
    ("ddp_usage_error", ["RuntimeError: ProcessGroupGloo does not support reduce_scatter"]),
    ("version_mismatch", ["ImportError: /lib64/libstdc++.so.6: version `CXXABI_1.3.11' not found"]),
    ("version_mismatch", ["ImportError: libc10_cuda.so: cannot open shared object file: No such "
                          "file or directory"]),
    ("version_mismatch", ["  Failed building wheel for flash-attn"]),
    ("horovod_specific", ["ERROR: Command errored out with exit status 1: /usr/bin/python -u -c "
                          "'import setuptools' install --install-headers "
                          "/opt/conda/include/python3.8/horovod Check the logs"]),
    # the raise in a traceback's code line, its string split in two
    ("version_mismatch", ['    raise RuntimeError("Distributed package doesn\'t have NCCL " "built in")']),
    ("version_mismatch", ["RuntimeError: Error building extension 'fused_adam'"]),
    ("launcher_misuse", ["ValueError: Total number of attention heads (32) must be divisible by "
                         "tensor parallel size (3)."]),
    # sbatch runs the script on the first node only
    ("launcher_misuse", ["#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "module load cuda",
                         "python train.py --epochs 10"]),
    ("launcher_misuse", ["#SBATCH -N 4", "torchrun --nnodes 4 --nproc-per-node 8 train.py"]),
    # the wrapped loopback warning of Gloo: the interface, not the rendezvous
    ("nccl_interface_selection", [
        "[rank8] Warning: Unable to resolve hostname to a (local) address. Using the loopback",
        "        address as fallback. Manually set the network interface with GLOO_SOCKET_IFNAME",
        "[rank8] Gloo connectFullMesh failed ... timed out connecting: SO_ERROR: Connection refused,"]),
])
def test_families_of_the_thirteenth_batch(category, log):
    findings = diagnose(log)
    assert findings and findings[0].category == category, [f.id for f in findings]


@pytest.mark.parametrize("log", [
    # srun (or a launcher that reaches the nodes itself) starts every node
    ["#SBATCH --nodes=2", "srun python train.py"],
    ["#SBATCH --nodes=2", "srun torchrun --nnodes 2 train.py"],
    ["#SBATCH --nodes=1", "python train.py"],
    ["#SBATCH --nodes=2", "deepspeed --hostfile hosts train.py"],
    # DTensor's own fallback notice is routine
    ["UserWarning: ProcessGroupGloo does not support reduce_scatter, falling back with all reduce!"],
])
def test_families_of_the_thirteenth_batch_stay_quiet(log):
    assert [f for f in diagnose(log) if f.category != "unknown"] == []


@pytest.mark.parametrize("line", ["Segmentation fault (core dumped)",
                                  "Signal 11 (SIGSEGV) received by PID 4242",
                                  "Fatal Python error: Segmentation fault",
                                  "Bus error (core dumped)"])
def test_a_process_killed_by_a_signal_is_a_failure_not_a_clean_log(line):
    """A crash prints no error word: it is still a failure, answered with its line."""
    report = diagnose_report(["epoch 1 loss 0.4", line])
    assert report.to_dict()["category"] != "none"
    assert report.to_dict()["first_failure"]["text"] == line
    # and the next check says how to get the stack a native crash did not print
    assert "PYTHONFAULTHANDLER=1" in report.next_checks[0]
    assert not any("PYTHONFAULTHANDLER" in c
                   for c in diagnose_report(["RuntimeError: boom"]).next_checks)


def test_wide_punctuation_separates_words_for_the_gate():
    """A Chinese log writes 'error：' and '（...）': the scanner's word gate must cut there, or a
    regex gated on 'error' never reads the line."""
    from ddpkit.troubleshoot.diagnose.kb import tokens

    assert tokens("NCCL error：unhandled system error（run with NCCL_DEBUG=INFO）") == [
        "nccl", "error", "unhandled", "system", "error", "run", "with", "nccl", "debug", "info"]
    ascii_line = "RuntimeError: NCCL error: unhandled system error, NCCL version 2.7.8"
    wide_line = "RuntimeError：NCCL error：unhandled system error，NCCL version 2.7.8"
    assert [f.id for f in diagnose([wide_line])] == [f.id for f in diagnose([ascii_line])] != []


def test_torchs_ipv6_store_warnings_are_routine():
    """torch 2.x tries IPv6 first for the store and warns on a host without it, then connects
    over IPv4: a correct run that prints these has no failure."""
    log = ["[W socket.cpp:436] [c10d] The server socket cannot be initialized on [::]:29500 "
           "(errno: 97 - Address family not supported by protocol).",
           "[W socket.cpp:663] [c10d] The client socket has failed to connect to [localhost]:29500 "
           "(errno: 99 - Cannot assign requested address).",
           "epoch 1 loss 0.31", "epoch 2 loss 0.22"]
    assert diagnose_report(log).to_dict()["category"] == "none"
    # the server failing to bind an address that is not this machine's is a failure
    bind = ["[E socket.cpp:957] [c10d] The server socket has failed to bind to 10.0.0.5:29500 "
            "(errno: 99 - Cannot assign requested address)."]
    assert diagnose_report(bind).to_dict()["category"] != "none"


def test_an_error_word_beside_a_run_that_completed_is_no_failure():
    """A metrics logger's ERROR in a run torchrun reports finished is not a failed run; the
    same line in a log that does not show the end stays `unknown` with its lines."""
    noise = "metrics: ERROR could not push the sample to the dashboard"
    done = ("INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully "
            "finished. Waiting 300 seconds for other agents to finish.")
    assert diagnose_report(["epoch 3 loss 0.12", noise, done]).to_dict()["category"] == "none"
    assert diagnose_report(["epoch 3 loss 0.12", noise]).to_dict()["category"] == "unknown"
    # an exception is a failure, whatever the end says
    crashed = ['  File "train.py", line 57, in <module>', "KeyError: 'image'", done]
    assert diagnose_report(crashed).to_dict()["category"] == "script_error"


def test_an_exception_python_ignored_is_not_the_scripts_failure():
    """'Exception ignored in: <...__del__>' and its traceback: Python printed it and went on."""
    log = ["Epoch 3: 100%| 500/500 loss=0.123",
           "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f8b2c1d3e50>",
           "Traceback (most recent call last):",
           '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", '
           "line 1437, in _shutdown_workers",
           "AttributeError: '_MultiProcessingDataLoaderIter' object has no attribute '_workers_status'",
           "INFO:torch.distributed.elastic.agent.server.api:[default] worker group successfully "
           "finished. Waiting 300 seconds for other agents to finish."]
    assert diagnose_report(log).to_dict()["category"] == "none"
    # without that first line the same traceback is the script's
    assert diagnose_report(log[:1] + log[2:]).to_dict()["category"] == "script_error"


@pytest.mark.parametrize("line", ["wandb: Network error (ReadTimeout), entering retry loop.",
                                  "wandb: ERROR Failed to sample metric: Not Supported"])
def test_a_metrics_loggers_retries_are_routine(line):
    assert diagnose_report(["epoch 1 loss 0.4", line, "epoch 2 loss 0.3"]).to_dict()[
        "category"] == "none"


# A log as it reaches a thread: through a web page (HTML entities, non-breaking spaces), quoted
# in a reply, pasted as a markdown code block (fences, or four spaces before every line), or
# collected by docker compose, kubectl --timestamps, journald or Ray (a prefix on every line).
KEYERROR = ["torchrun --nproc_per_node=2 train.py",
            "[rank1]: Traceback (most recent call last):",
            '[rank1]:   File "/work/train.py", line 57, in <module>',
            "[rank1]:     x = batch[\"image\"]",
            "[rank1]: KeyError: 'image'",
            "E1201 10:00:00.000 torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: 1) local_rank: 1 (pid: 4242) of binary: /usr/bin/python3"]
PORT = ["[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29500 "
        "(errno: 98 - Address already in use).",
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. The server socket has failed to bind to [::]:29500 (errno: 98 - "
        "Address already in use). The server socket has failed to bind to 0.0.0.0:29500 "
        "(errno: 98 - Address already in use)."]
PASTED = {
    "html": lambda ls: [ln.replace('"', "&quot;").replace("'", "&#39;") for ln in ls],
    "nbsp": lambda ls: [ln.replace(" ", "\u00a0") for ln in ls],
    "quoted": lambda ls: ["> " + ln for ln in ls],
    "fenced": lambda ls: ["```text", *ls, "```"],
    "indented": lambda ls: ["    " + ln for ln in ls],
    "compose": lambda ls: ["trainer_1  | " + ln for ln in ls],
    "kubectl": lambda ls: [f"2024-05-01T10:00:0{i % 10}.123456789Z {ln}" for i, ln in enumerate(ls)],
    "journald": lambda ls: [f"Dec 01 10:00:0{i % 10} gpu01 python[4242]: {ln}"
                            for i, ln in enumerate(ls)],
    "ray": lambda ls: ["(RayTrainWorker pid=4242, ip=10.0.0.2) " + ln for ln in ls],
}


@pytest.mark.parametrize("how", sorted(PASTED))
def test_a_log_pasted_into_a_thread_reads_the_same(how):
    mangle = PASTED[how]
    report = diagnose_report(mangle(KEYERROR))
    assert report.findings[0].category == "script_error", (how, report.findings)
    assert "KeyError: 'image'" in report.findings[0].title
    assert diagnose(mangle(PORT))[0].category == "port_in_use_or_firewall", how


def test_a_stamp_before_every_traceback_line_is_read_past():
    stamped = [f"[2024-05-01 10:00:0{i},123] {ln}" for i, ln in enumerate([
        "Traceback (most recent call last):", '  File "/work/train.py", line 57, in <module>',
        '    x = batch["image"]', "KeyError: 'image'"])]
    assert diagnose_report(stamped).findings[0].category == "script_error"


def test_a_ray_worker_prefix_says_where_the_line_came_from():
    line = normalise("(RayTrainWorker pid=4242, ip=10.0.0.2) RuntimeError: boom", 1)
    assert (line.text, line.where) == ("RuntimeError: boom", "10.0.0.2 pid 4242")


# The families learnt from batches unseen17-23, each in a wording other than its log's.
@pytest.mark.parametrize("sig, log", [
    ("horovod-api-missing", ["AttributeError: module 'horovod.torch' has no attribute 'ProcessSet'"]),
    ("horovod-api-missing", ["ImportError: cannot import name 'elastic' from 'horovod.torch' "
                             "(/usr/lib/python3/dist-packages/horovod/torch/__init__.py)"]),
    ("horovod-optimizer-frames", [
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.8/site-packages/horovod/torch/optimizer.py", line 120, '
        "in synchronize",
        "    handle, ctx = self._allreduce_grad_async(p)",
        "ValueError: unsupported dtype"]),
    ("host-allocation-failed", ["RuntimeError: [enforce fail at ..\\c10\\core\\impl\\alloc_cpu.cpp:72]"
                                " data. DefaultCPUAllocator: not enough memory: you tried to "
                                "allocate 4194304 bytes."]),
    ("launcher-flags-after-script", [
        "usage: main.py [-h] [--epochs EPOCHS]",
        "main.py: error: unrecognized arguments: --nnodes=2 --node_rank=1 --master_addr=10.1.1.1"]),
    ("env-rendezvous-var-not-set", [
        "composer.utils.dist.MissingEnvironmentError: Torch distributed is initialized but "
        "environment variable LOCAL_WORLD_SIZE is not set."]),
    ("worker-sigkill-host-oom", ["'--save_path', './ckpt/'", "] exits with return code = -9"]),
    ("ddp-inplace-buffer-broadcast", [
        "RuntimeError: one of the variables needed for gradient computation has been modified "
        "by an in-place operation: [torch.cuda.FloatTensor [64]] is at version 3"]),
    # batches unseen21-23 (2018-2021 threads, hangs, messages searched by their words)
    ("torch-api-missing", ["TypeError: __init__() got an unexpected keyword argument "
                           "'static_graph'"]),
    ("torch-api-missing", ["TypeError: __init__() got an unexpected keyword argument "
                           "'ddp_find_unused_parameters'"]),
    ("torch-without-cuda-or-nccl", [
        "RuntimeError: the distributed NCCL backend is not available; try to recompile the THD "
        "package with CUDA and NCCL 2+ support at torch/lib/THD/process_group/General.cpp:17"]),
    ("gloo-address-families-differ", [
        "RuntimeError: [enforce fail at gloo/transport/tcp/device.cc:208] ss1.ss_family == "
        "ss2.ss_family. 10 vs 2"]),
    ("ddp-unused-parameters", ["TypeError: _queue_reduction(): incompatible function arguments. "
                               "The following argument types are supported:"]),
    ("worker-sigkill-host-oom", ["'--fp16', '--overwrite'] exits with return code = -9"]),
    ("rank-claimed-twice", ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
                            "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/8",
                            "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/8"]),
    ("nccl-topology-graph-bug", ["node3:41:41 [3] graph/rings.cc:38 NCCL WARN Error : ring 1 does "
                                 "not loop back to start (5 != 7)."]),
    ("nccl-bootstrap-message-size", [
        "node2:4827:6900 [4] bootstrap.cc:77 NCCL WARN Message truncated : received 64 bytes "
        "instead of 256"]),
    ("process-bus-error", ["[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py'] "
                       "exits with return code = -7"]),
    ("store-barrier-over-full", [
        "INFO Waiting in store based barrier to initialize process group for rank: 3, key: "
        "store_based_barrier_key:1 (world_size=4, worker_count=12, timeout=0:30:00)"]),
])
def test_families_from_the_seventeenth_batches_on(sig, log):
    findings = diagnose(log)
    assert findings and findings[0].id == sig, [f.id for f in findings]


def test_a_failed_first_barrier_is_not_a_preprocessing_wait():
    log = ['  File "/x/transformers/training_args.py", line 2084, in main_process_first',
           "    dist.barrier()",
           "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1331, "
           "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5"]
    assert "main-process-first-barrier" not in [f.id for f in diagnose(log)]


def test_an_ipv6_link_local_host_address_is_the_interface():
    log = ["[c10d] The IPv4 network addresses of (fe80::222:48ff:fe49:ba90, 51391) cannot be "
           "retrieved (gai error: -9 - Address family for hostname not supported)."]
    assert diagnose(log)[0].id == "c10d-ipv6-host-address"
    # a host name that does not resolve is still the rendezvous address
    dns = ["[c10d] The IPv4 network addresses of (master-0, 29500) cannot be retrieved "
           "(gai error: -2 - Name or service not known)."]
    assert diagnose(dns)[0].category == "rendezvous_master_unreachable"


def test_a_log_cut_at_the_terminal_width_is_read_joined():
    """Copied from a terminal that cut long lines at 80 columns: the cut lines are joined."""
    long = PORT[1] + " " + PORT[1]
    cut = [long[i:i + 80] for i in range(0, len(long), 80)]
    assert all(len(row) == 80 for row in cut[:-1]) and len(cut) >= 4
    assert diagnose(["torchrun --nproc_per_node 2 train.py", *cut])[0].category == \
        "port_in_use_or_firewall"
    from ddpkit.troubleshoot.diagnose.lines import unwrap
    # the rows of a table are as wide as each other: never joined
    table = ["     8388608       2097152     float     sum      -1    156.3   53.68   93.93      0"
             "    155.9   53.80   94.15      0"] * 5
    assert unwrap("\n".join(table)) == "\n".join(table)
    joined = unwrap("\n".join(cut)).split("\n")
    assert joined[0] == long and len(joined) == len(cut)  # every line keeps its number


def test_each_rank_announcing_itself_once_is_no_finding():
    log = [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in range(4)]
    assert "rank-claimed-twice" not in [f.id for f in diagnose(log)]
    full = ["Waiting in store based barrier to initialize process group for rank: 0, key: "
            "store_based_barrier_key:1 (world_size=4, worker_count=4, timeout=0:30:00)"]
    assert "store-barrier-over-full" not in [f.id for f in diagnose(full)]


def test_an_iso_stamp_is_kept_as_time_and_cut_from_the_text():
    line = normalise("[2024-05-01 10:00:07,123] FileNotFoundError: [Errno 2] No such file", 1)
    assert line.text == "FileNotFoundError: [Errno 2] No such file"
    assert line.time is not None and line.time == normalise("2024-05-01 10:00:07.123 x", 1).time
    log = ["[2024-05-01 10:00:06,001] torchrun --nproc_per_node=2 train.py",
           "[2024-05-01 10:00:07,123] FileNotFoundError: [Errno 2] No such file or directory: "
           "'data/val.pickle'"]
    assert diagnose_report(log).findings[0].category == "script_error"


def test_a_rank_claimed_twice_counts_the_world_not_the_lines():
    def claims(ranks, world):
        return [f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/{world}" for r in ranks]
    # two 8-GPU nodes that both took ranks 0-7 of a world of 16
    both = claims(range(8), 16) + claims(range(8), 16)
    assert "rank-claimed-twice" in [f.id for f in diagnose(both)]
    # a worker group restarted by torchrun announces every rank again: no finding
    restarted = claims(range(4), 4) + claims(range(4), 4)
    assert "rank-claimed-twice" not in [f.id for f in diagnose(restarted)]


def test_cut_lines_are_joined_only_where_a_terminal_cut_them():
    from ddpkit.troubleshoot.diagnose.lines import unwrap
    warning = "[W ProcessGroupNCCL.cpp:2302] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS=1 has no eff"
    log = [warning] * 3 + ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1331, unhandled"]
    assert unwrap("\n".join(log)) == "\n".join(log)  # one line printed by three ranks
    long = PORT[1] + " " + PORT[1]
    cut = [long[i:i + 80] for i in range(0, len(long), 80)]
    indented = ["    torchrun --nproc_per_node 2 train.py"] + ["    " + row for row in cut]
    assert diagnose(indented)[0].category == "port_in_use_or_firewall"
    # every rank's "Init COMPLETE" line is as wide as the others and ends alike: records of one
    # format, not cut ones; the kernel's line after them is a line of its own
    init = ["[1,{r}]<stdout>:worker-0:2{r}:57{r} [{r}] NCCL INFO comm 0x559fe738064{r} rank {r} nranks 8 "
            "cudaDev {r} busId 1{r}0 - Init COMPLETE".format(r=r) for r in range(8)]
    xid = "NVRM: Xid (PCI:0000:3b:00): 74, pid='<unknown>', NVLink: failed to train link 2"
    assert diagnose(init + [xid])[0].category == "oom_cuda_error"


def test_a_collector_stamp_keeps_its_time_and_an_entity_space_is_a_space():
    line = normalise("2024-05-01T10:00:07.123456789Z [rank1]: RuntimeError: boom", 1)
    assert (line.text, line.where) == ("RuntimeError: boom", "rank 1")
    assert line.time == normalise("2024-05-01 10:00:07.123456789 x", 1).time
    from ddpkit.troubleshoot.diagnose.lines import clean
    assert clean("a&nbsp;b &#160;c") == "a b  c"


# An unhandled CUDA error inside NCCL is a family of three causes: the "Cuda failure" text, when
# the log holds it, picks one; without it a release that does not fit ranks first.
@pytest.mark.parametrize("failure, first", [
    (None, "version_mismatch"),
    ("Cuda failure 'invalid argument'", "version_mismatch"),
    ("Cuda failure 2 'out of memory'", "oom_cuda_error"),
    ("Cuda failure 217 'peer access is not supported between these two devices'",
     "p2p_acs_iommu"),
])
def test_an_unhandled_cuda_error_is_read_by_its_failure(failure, first):
    log = ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error "
           "(run with NCCL_DEBUG=INFO for details), NCCL version 2.18.5",
           "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:"]
    findings = diagnose(log + ([failure] if failure else []))
    cats = [f.category for f in findings]
    assert cats[0] == first, [f.id for f in findings]
    if failure is None:  # the other two stay in the answer, below it
        assert cats[:3] == ["version_mismatch", "oom_cuda_error", "p2p_acs_iommu"]
    if failure and "out of memory" in failure:  # memory named: no release guess above it
        assert "nccl-unhandled-cuda-error-release" not in [f.id for f in findings]


@pytest.mark.parametrize("fact", [
    "total gpus is: 16",
    "Namespace(backend='nccl', world_size=32, rank=5)",
    "export SLURM_NNODES=4",
])
def test_a_run_of_more_ranks_than_a_node_holds_hangs_across_nodes(fact):
    log = ["2022-10-12 01:39:21,020 INFO training on multiple gpus, this gpu 0", fact]
    hung = diagnose_report(log, hung=True).findings
    assert hung[0].category == "nccl_interface_selection", [f.id for f in hung]
    one_node = diagnose_report(log[:1] + ["Namespace(backend='nccl', world_size=8, rank=5)"],
                               hung=True).findings
    assert one_node[0].category == "p2p_acs_iommu"


def test_a_log_word_wrapped_by_a_forum_is_read_joined():
    """Pasted where long lines were word-wrapped (at 80 columns here): the rows are joined."""
    import textwrap

    from ddpkit.troubleshoot.diagnose.lines import rewrap
    log = ["torchrun --nproc_per_node 2 train.py",
           "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
           "ProcessGroupNCCL.cpp:1691, unhandled system error (run with NCCL_DEBUG=INFO for "
           "details), NCCL version 2.19.3",
           "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
           "device error. Last error: Error while creating shared memory segment "
           "/dev/shm/nccl-kcXbUT (size 9637888)"]
    wrapped = [row for line in log for row in textwrap.wrap(line, 80, break_on_hyphens=False)]
    assert len(wrapped) >= 6
    assert diagnose(wrapped)[0].category == "shared_memory_docker"
    rows = rewrap("\n".join(wrapped)).split("\n")
    assert len(rows) == len(wrapped)  # every line keeps its number
    assert rows[1].startswith("torch.distributed.DistBackendError") and "2.19.3" in rows[1]
    # a shell session nobody wrapped: prompts and listings are records of their own
    shell = ["(venv) root@dgx-035:/workspace/nccl-tests# ls $NCCL_HOME/lib/libnccl.so.2 -lh",
             "lrwxrwxrwx 1 root root 17 Jul 17 19:02 /workspace/nccl/build/lib/libnccl.so.2 -> "
             "libnccl.so.2.27.0",
             "(venv) root@dgx-035:/workspace/nccl-tests# ls /usr/lib/x86_64-linux-gnu/libnccl.so.2",
             "lrwxrwxrwx 1 root root 17 Sep 10  2024 /usr/lib/x86_64-linux-gnu/libnccl.so.2 -> "
             "libnccl.so.2.23.4"]
    assert rewrap("\n".join(shell)) == "\n".join(shell)


NCCL_TESTS_HEADER = [
    "#       size         count      type   redop    root     time   algbw   busbw #wrong     time"
    "   algbw   busbw #wrong"]


@pytest.mark.parametrize("row, wrong", [
    # (the columns of nccl-tests' all_reduce_perf: out of place, then in place)
    ("   1073741824     268435456     float     sum      -1    20079   53.48   93.58     12    19265"
     "   55.74   97.54      0", True),
    ("   1073741824     268435456     float     sum      -1    20079   53.48   93.58      0    19265"
     "   55.74   97.54      7", True),
    ("     33554432       8388608     float     sum    19.56  1715.44    0.00      3     0.78  4304"
     "6.10    0.00    N/A", True),  # an older release: no root column
    ("   1073741824     268435456     float     sum      -1    20079   53.48   93.58      0    19265"
     "   55.74   97.54      0", False),
    ("    33554432       8388608     float    none      -1    19.56  1715.44    0.00      0     0.78"
     "  43046.10    0.00    N/A", False),
    # a row a forum wrapped before "0" and a terminal-cut reader joined: a column is missing, so
    # the time of the in-place run is not a count of wrong values
    ("   1073741824     268435456     float     sum      -1    20079   53.48   93.580    19265   55"
     ".74   97.54      0", False),
])
def test_nccl_tests_wrong_values_are_read_from_a_whole_row_only(row, wrong):
    ids = [f.id for f in diagnose(NCCL_TESTS_HEADER + [row, "# Avg bus bandwidth    : 93.5"])]
    assert ("nccl-tests-wrong-results" in ids) is wrong, ids


@pytest.mark.parametrize("line, category", [
    # Horovod's coordinator refuses these while a rank has called hvd.join()
    ("horovod.common.exceptions.HorovodInternalError: Allgather is not supported with Join at "
     "this time. Specify sparse_to_dense=True if using DistributedOptimizer", "horovod_specific"),
    ("RuntimeError: Reducescatter is not supported with Join at this time.", "horovod_specific"),
    ("RuntimeError: Process-set rank zero tried to ALLGATHER a rank-zero tensor.",
     "horovod_specific"),
    # DistributedSampler given fewer replicas than ranks (Lightning's num_nodes left at 1)
    ("ValueError: Invalid rank 8, rank should be in the interval [0, 7]", "launcher_misuse"),
    # pdsh (DeepSpeed's multi-node launcher) still on its rsh module
    ("pdsh@node1: node2: rcmd: socket: Permission denied", "ssh_failure"),
    ("rcmd: socket: Permission denied", "ssh_failure"),
    # the descriptors of a tensor shared with a DataLoader worker did not arrive (ulimit -n)
    ("RuntimeError: received 0 items of ancdata", "shared_memory_docker"),
    # a CPU tensor given to a process group with only NCCL in it (torch 2.x's dispatcher)
    ("NotImplementedError: Could not run 'c10d::allreduce_' with arguments from the 'CPU' "
     "backend. This could be because the operator doesn't exist for this backend",
     "ddp_usage_error"),
    # the toolkit's stub libcuda loaded instead of the driver's
    ("init.cc:261 NCCL WARN Cuda failure 'CUDA driver is a stub library'",
     "version_mismatch"),
    # a C++/CUDA extension that cannot be built here (no toolkit, nvcc older than the GPU, a
    # host compiler newer than the toolkit allows)
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
     "root.", "version_mismatch"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_90'", "version_mismatch"),
    ("/usr/local/cuda/include/crt/host_config.h:132:2: error: #error -- unsupported GNU version! "
     "gcc versions later than 11 are not supported!", "version_mismatch"),
    # a cuDNN on LD_LIBRARY_PATH shadows the one torch bundles
    ("RuntimeError: cuDNN version incompatibility: PyTorch was compiled  against (8, 9, 2) but "
     "found runtime version (8, 4, 0). PyTorch already comes bundled with cuDNN.",
     "version_mismatch"),
    # a rank that reached monitored_barrier while rank 0 did not answer: an echo of rank 0
    ("RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while "
     "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
     "nccl_timeout_or_desync"),
])
def test_families_read_from_the_sources_name_their_cause(line, category):
    assert [f.category for f in diagnose([line])][:1] == [category]


@pytest.mark.parametrize("line", [
    # warnings of runs that go on: the same words raised would be a cause
    "WARNING 05-01 10:00:00 [nixl_connector.py:50] NIXL is not available",
    "UserWarning: FlashAttention requires torch >= 2.0, falling back to the math kernel",
    "[2025-01-01 10:00:00,000] [WARNING] [config.py:12] DeepSpeed version should be >= 0.16.4 "
    "for tensor parallel inference",
])
def test_a_version_requirement_only_warned_is_no_finding(line):
    assert diagnose([line]) == []


@pytest.mark.parametrize("line", [
    # printed by runs that go on (a review of the catalogue rounds' families found each)
    "misc/xml.cc:50 NCCL WARN Could not open XML topology file /opt/microsoft/ndv4-topo.xml : "
    "No such file or directory",
    "2024-01-01 10:00:00,000\tWARNING utils.py:1333 -- Unable to connect to GCS at "
    "nid00911:6379. Check that (1) Ray GCS with matching version started successfully at the "
    "specified address, and (2) there is no firewall setting preventing access.",
    "[1700000000.123456] [node1:2345 :0]     ucp_context.c:1263 UCX  WARN  network device "
    "'mlx5_2:1' is not available, please use one or more of: 'mlx5_0:1'(ib)",
    "E1203 12:35:00.123000 2345 torch/distributed/elastic/agent/server/api.py:1008] Error "
    "waiting on exit barrier. Elapsed: 300.0 seconds",
    "srun: error: node2: tasks 0-7 unable to claim reserved port, retrying.",
])
def test_warnings_of_working_runs_are_no_finding(line):
    # (a line with an error word may still be shown as `unknown` with its lines: no cause)
    assert causes([line]) == []


@pytest.mark.parametrize("line, category", [
    ("enqueue.cc:1971 NCCL WARN Error : no algorithm/protocol available for function AllReduce "
     "with datatype ncclInt8. NCCL_ALGO was set to Tree. NCCL_PROTO was set to LL128.",
     "launcher_misuse"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_100a'", "version_mismatch"),
    ("srun: error: node01: tasks 0-3 unable to claim reserved port, aborting.",
     "port_in_use_or_firewall"),
    ("ConnectionError: Could not read 'session_name' from GCS. Did GCS start successfully?",
     "rendezvous_master_unreachable"),
])
def test_the_reviewed_families_read_their_real_wordings(line, category):
    assert [f.category for f in diagnose([line])][:1] == [category]


@pytest.mark.parametrize("lines", [
    # round seven's review: settings banners (torch 2.3, 2.7+) beside a loopback bootstrap on
    # one machine; a REJECT rule listed on a stock host; SELinux denials in permissive mode;
    # the Kubeflow init container's loop during a normal start; xFormers' warning at import
    ["node1:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
     "I1203 10:00:00.000 ProcessGroupNCCL.cpp:900] [PG 0 Rank 0] HeartbeatMonitor environments: "
     "TORCH_NCCL_ENABLE_MONITORING (Whether to kill program when no watchdog heartbeat "
     "detected): 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 15000, "
     "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480"],
    ["node1:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
     "I0501 10:00:00.000 ProcessGroupNCCL.cpp:810] [Rank 0] ProcessGroupNCCL initialization "
     "options: NCCL version: 2.20.5, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 600"],
    ["REJECT     all  --  anywhere             anywhere             reject-with "
     "icmp-host-prohibited"],
    ['type=AVC msg=audit(1700000000.1:45): avc:  denied  { name_connect } for  pid=2345 '
     'comm="python" dest=29500 scontext=a tcontext=b tclass=tcp_socket permissive=1',
     "RuntimeError: The client socket has failed to connect to node0:29500 (errno: 111 - "
     "Connection refused)."],
    ["waiting for master", "waiting for master", "waiting for master"],
    ["WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:"],
])
def test_state_that_working_hosts_show_is_no_cause_of_its_own(lines):
    got = diagnose(lines)
    assert not {"firewall-rule-or-selinux-blocks", "kubeflow-init-waiting-for-master",
                "collective-transport-on-loopback", "extension-built-for-other-torch"} & {
        f.id for f in got}, [(f.id, f.category) for f in got]


@pytest.mark.parametrize("lines, wanted", [
    (["waiting for master", "pytorchjob-worker-0   0/1   Init:CrashLoopBackOff   5   4m"],
     "kubeflow-init-waiting-for-master"),
    # Python 3.12+'s repr of a notebook's __main__, and 3.14's pickling error
    (["AttributeError: Can't get attribute 'train' on <module '__main__' (<class "
      "'_frozen_importlib.BuiltinImporter'>)>"], "spawned-object-not-picklable"),
    (["_pickle.PicklingError: Can't pickle local object <function main.<locals>.worker at "
      "0x7fb4c8d2a160>"], "spawned-object-not-picklable"),
    # an installed torch too old for the module, not a node without torch
    (["/usr/bin/python3: No module named torch.distributed.run"], "torch-api-missing"),
    (["/usr/bin/python3: No module named torch"], "node-python-lacks-package"),
    (["node2:1:1 [0] NCCL WARN Net : Connect to 10.0.0.2<43210> failed : Connection timed out"],
     "nccl-connect-timed-out"),
    (["RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo"], "pg-backend-lacks-op"),
    (["ValueError: You set `strategy=ddp` but strategies from the DDP family are not supported "
      "on the MPS accelerator. Either explicitly set `accelerator='cpu'` or change the "
      "strategy."], "lightning-ddp-on-mps"),
    (["RuntimeError: torch.distributed is not available. Cannot initialize distributed process "
      "group"], "torch-built-without-distributed"),
    (["RuntimeError: Found Tesla P100-PCIE-16GB which is too old to be supported by the triton "
      "GPU compiler, which is used as the backend."], "gpu-older-than-software-or-arch-list-invalid"),
    (["node1:1:1 [0] NCCL WARN NCCL library is too old. This application was compiled with NCCL "
      "version 2.30.4, but is running with NCCL library version 2.28.9."], "nccl-undefined-symbol"),
])
def test_round_seven_families_after_review(lines, wanted):
    got = diagnose(lines)
    assert got and got[0].id == wanted, [(f.id, f.category) for f in got]


def test_a_reject_rule_beside_a_refused_route_supports_the_firewall():
    got = diagnose(["REJECT     all  --  anywhere             anywhere             reject-with "
                    "icmp-host-prohibited",
                    "RuntimeError: The client socket has failed to connect to node0:29500 "
                    "(errno: 113 - No route to host)."])
    assert got[0].category == "port_in_use_or_firewall"
    assert "firewall-rule-or-selinux-blocks" in [
        s["signature"] for s in got[0].evidence["supporting"]]


def test_a_horovod_extension_missing_libmpi_is_horovods_family_first():
    got = [f.id for f in diagnose([
        '  File "/usr/lib/python3/dist-packages/horovod/torch/mpi_ops.py", line 50, in <module>',
        "ImportError: libmpi.so.40: cannot open shared object file: No such file or directory"])]
    assert got[:1] == ["horovod-extension-missing-library"]


def test_a_daemon_without_libmpi_in_a_horovodrun_log_is_still_named():
    got = [f.id for f in diagnose([
        '  File "/usr/lib/python3/dist-packages/horovod/runner/mpi_run.py", line 256, in mpi_run',
        "orted: error while loading shared libraries: libmpi.so.40: cannot open shared object "
        "file: No such file or directory"])]
    assert got[:1] == ["mpi-library-missing"]


@pytest.mark.parametrize("lines", [
    # round eight's review: lines of working runs that its rules had made causes
    ["INFO:root:node3[0] has been removed from elastic job"],
    ["REJECT     all  --  anywhere             anywhere             reject-with "
     "icmp-host-prohibited",
     "[W1203 10:00:00.000 socket.cpp:752] [c10d] The client socket has failed to connect to "
     "[node0]:29500 (errno: 111 - Connection refused).", "epoch 1 loss 0.5"],
    ["[NeMo W 2024-01-01 10:00:00 exp_manager:557] You are running multi-node training without "
     "SLURM handling the processes. Please note that this is not tested in NeMo and could "
     "result in errors.",
     "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize "
     "process group for rank: 0, key: store_based_barrier_key:1 (world_size=16, "
     "worker_count=8, timeout=0:30:00)", "Epoch 0: 10% loss=2.1"],
    ["  Rank 3 has launched up to operation 41234 -- GPU 3 managed by process 2348 on node node1"],
    ["The OpenFabrics (openib) BTL failed to initialize while trying to allocate some locked "
     "memory.  This typically can indicate that the memlock limits are set too low."],
    ["bash: fork: retry: Resource temporarily unavailable", "Epoch 3 done"],
])
def test_round_eight_lines_of_working_runs_are_no_cause(lines):
    assert causes(lines) == []


@pytest.mark.parametrize("line, wanted", [
    # torch >= 2.1 names the default group 0: key 1 is the first new_group, key 0 the init
    ("torch.distributed.DistStoreError: Timed out initializing process group in store based "
     "barrier on rank 3, for key: store_based_barrier_key:1 (world_size=8, num_workers_joined=4, "
     "timeout=0:30:00)", "new-group-barrier-not-all-ranks"),
    ("torch.distributed.DistStoreError: Timed out initializing process group in store based "
     "barrier on rank 3, for key: store_based_barrier_key:0 (world_size=8, num_workers_joined=4, "
     "timeout=0:30:00)", "store-clients-joined-timeout"),
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for "
     "key: store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
     "store-clients-joined-timeout"),
    ("RuntimeError: There was an unpickling error in all_gather_list. This likely means your "
     "workers got out of syncronization (e.g. one is expecting to sync and another is not.)",
     "fairseq-all-gather-list-out-of-sync"),
    ("srun: fatal: SLURM_TRES_PER_TASK is mutually exclusive with --ntasks-per-gpu and "
     "SLURM_NTASKS_PER_GPU", "slurm-step-geometry-rejected"),
    ('Warning  Evicted  3m  kubelet  Usage of EmptyDir volume "shared-memory" exceeds the limit '
     '"1Gi".', "torch-shm-write-failed"),
    ("tensorflow.python.framework.errors_impl.InvalidArgumentError: 'visible_device_list' listed "
     "an invalid Device id '1' but visible device count is 1", "cuda-invalid-device-ordinal"),
    ("_pickle.PicklingError: Can't pickle local object <class "
     "'__main__.main.<locals>.MyDataset'>", "spawned-object-not-picklable"),
    ("ValueError: Cannot use ReduceOp.PREMUL_SUM with XCCL", "pg-backend-lacks-op"),
    ("node1:1:1 [0] NCCL WARN NCCL library is not backwards compatible. This application was "
     "compiled with NCCL version 2.28.3, but is running with NCCL library version 2.30.7.",
     "nccl-newer-than-extension"),
    ("RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) "
     "but found one of them on device: cuda:1", "dataparallel-module-not-on-first-device"),
    ("ERROR: Task 1 declared addresses {'eth0': [('172.17.0.3', 35031)]}, but has connected from "
     "a different address 10.0.0.2. This is not supported. Is the server behind NAT?",
     "horovodrun-no-common-interface"),
    ("error: NCCL 2.0 library or its later version was not found (see error above).",
     "horovod-build-missing-dependency"),
    ("ValueError: The config file at /root/.cache/huggingface/accelerate/default_config.yaml had "
     "unknown keys (['enable_cpu_affinity'])", "accelerate-config-from-newer-release"),
    ("ValueError: Unknown CUDA arch (8.9) or GPU not supported",
     "gpu-older-than-software-or-arch-list-invalid"),
    ("ValueError: The rendezvous configuration string must be in format <key1>=<value1>,...,"
     "<keyN>=<valueN>.", "launcher-option-malformed"),
])
def test_round_eight_families_after_review(line, wanted):
    got = diagnose([line])
    assert got and got[0].id == wanted, [(f.id, f.category) for f in got]


def test_rank0s_own_error_comes_before_the_monitored_barrier_that_waited_for_it():
    log = ["[rank0]: Traceback (most recent call last):",
           '[rank0]:   File "/work/train.py", line 40, in <module>',
           "[rank0]:     wandb.init(project='x')",
           "[rank0]: wandb.errors.errors.UsageError: No API key configured. Use `wandb login` to "
           "log in.",
           "[rank1]: Traceback (most recent call last):",
           '[rank1]:   File "/work/train.py", line 52, in <module>',
           "[rank1]:     dist.monitored_barrier()",
           "[rank1]: RuntimeError: Rank 1 successfully reached monitoredBarrier, but received "
           "errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty "
           "rank."]
    found = diagnose(log)
    assert found[0].category == "script_error" and "rank 0" in found[0].title, found[0].title
    assert "monitored-barrier-rank0-failed" in [f.id for f in found]


def test_an_exception_whose_message_is_a_cause_is_not_also_the_scripts_error():
    """torch's driver check raises a bare AssertionError and prints its message on the next
    lines: that message is the cause, not a second, plain error of the script."""
    log = ['  File "/opt/conda/lib/python3.7/site-packages/torch/cuda/__init__.py", line 63, in '
           "_check_driver",
           '    of the CUDA driver.""".format(str(torch._C._cuda_getDriverVersion())))',
           "AssertionError:",
           "The NVIDIA driver on your system is too old (found version 10010).",
           "Please update your GPU driver by downloading and installing a new"]
    assert [f.category for f in diagnose(log)] == ["version_mismatch"]
    # an exception of the script with its own message beside a cause stays a finding
    own = log[:2] + ["KeyError: 'image'"] + log[3:]
    assert "script_error" in [f.category for f in diagnose(own)]


def test_horovodrun_gloo_prefix_names_the_rank_and_a_script_in_a_horovod_folder_is_the_script():
    line = normalise("[2]<stderr>:RuntimeError: boom", 1)
    assert (line.text, line.where) == ("RuntimeError: boom", "rank 2")
    log = ["[0]<stdout>:hi! 0",
           "[2]<stderr>:Traceback (most recent call last):",
           '[2]<stderr>:  File "/home/rb/code/horovod/meh/test.py", line 11, in <module>',
           '[2]<stderr>:    raise RuntimeError("worker refuses to start")',
           "[2]<stderr>:RuntimeError: worker refuses to start",
           "Process 2 exit with status code 1."]
    first = diagnose(log)[0]
    assert first.category == "script_error" and "rank 2" in first.title, first.title
    # raised inside Horovod's own package: not the script's
    lib = log[:2] + ['[2]<stderr>:  File "/usr/lib/python3/dist-packages/horovod/torch/'
                     'mpi_ops.py", line 200, in allreduce_'] + log[3:]
    assert "script_error" not in [f.category for f in diagnose(lib)]


def test_pdsh_host_column_is_where_the_line_came_from():
    """deepspeed's multi-node runner relays each worker's lines through pdsh as "host: line"."""
    log = ["worker-1: Traceback (most recent call last):",
           'worker-1:   File "/work/train.py", line 57, in <module>',
           'worker-1:     x = batch["image"]',
           "worker-1: KeyError: 'image'",
           "worker-0: [2023-07-01 10:00:00,000] [INFO] [launch.py:315:sigkill_handler] Killing "
           "subprocess 3966"]
    first = diagnose(log)[0]
    assert first.category == "script_error" and first.title.startswith("worker-1 raised KeyError")
    # a log whose lines start with exceptions and levels has no host column
    from ddpkit.troubleshoot.diagnose.lines import host_column
    assert host_column("RuntimeError: a\nValueError: b\nINFO: c\nWARNING: d") is None
    assert host_column("torch.distributed.DistBackendError: x\nnode-1: y\nnode-1: z") is None


@pytest.mark.parametrize("prefix, where, who", [
    ("[pod/trainer-worker-0/pytorch] ", "trainer-worker-0", "trainer-worker-0"),  # kubectl
    ("(worker1, rank=1, pid=2233, ip=10.0.0.3) ", "worker1:1", "rank 1 (worker1)"),  # SkyPilot
    ("(head, rank=0, pid=2515) ", "head:0", "rank 0 (head)"),
])
def test_cluster_tools_prefixes_say_where_the_line_came_from(prefix, where, who):
    line = normalise(prefix + "KeyError: 'image'", 1)
    assert (line.text, line.where) == ("KeyError: 'image'", where)
    log = [prefix + row for row in ["Traceback (most recent call last):",
                                    '  File "/work/train.py", line 57, in <module>',
                                    "KeyError: 'image'"]]
    assert diagnose(log)[0].title.startswith(who + " raised KeyError")


def test_rejoining_never_takes_lines_of_their_own_for_a_wrapped_one():
    """Found in review: lines of two sources, a traceback pasted without its indent, an srun
    rank, a program's or a logger's name before a colon are no wrapped rows or host columns."""
    from ddpkit.troubleshoot.diagnose.lines import host_column, rewrap
    # two compose services' NCCL lines of about one length, then one's WARN: read on its line
    chan = "NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0"
    log = [f"master_1  | node-a:101:201 [0] {chan}", f"worker_1  | node-b:102:202 [0] {chan}",
           f"master_1  | node-a:101:201 [0] {chan} x", f"worker_1  | node-b:102:202 [0] {chan} y",
           "worker_1  | node-b:102:202 [0] misc/socket.cc:484 NCCL WARN Net : Connection closed "
           "by remote peer"]
    assert rewrap("\n".join(log)) == "\n".join(log)
    first = diagnose(log)[0]
    assert first.evidence["line"] == 5 and first.evidence["where"] == "worker_1"
    # a traceback pasted without indents: each frame line stays its own
    tb = ['File "/usr/lib/python3/dist-packages/torch/distributed/rendezvous.py", line 185, in '
          '_create_c10d_store', "return TCPStore(", 'File "/usr/lib/python3/dist-packages/torch/'
          'distributed/distributed_c10d.py", line 595, in init_process_group',
          "store, rank, world_size = next(rendezvous_iterator)"]
    assert rewrap("\n".join(tb)) == "\n".join(tb)
    # srun -l's rank, python's own name, a logger's module path: no host column
    assert host_column("0: Traceback (most recent call last):\n0: KeyError: 'x'\n1: hi") is None
    assert host_column("python3: can't open file 'a.py'\npython3: can't open file 'b.py'") is None
    assert host_column("torch.distributed.elastic.multiprocessing.api: [WARNING] a\n"
                       "torch.distributed.elastic.multiprocessing.api: [ERROR] b") is None
    srun = ["0: Traceback (most recent call last):", '0:   File "/work/train.py", line 57, in '
            "<module>", '0:     x = batch["image"]', "0: KeyError: 'image'", "1: hello"]
    assert diagnose(srun)[0].title.startswith("rank 0 raised KeyError")


def test_a_bare_exception_is_hidden_only_by_a_cause_on_its_own_ranks_next_lines():
    tb = ["[rank0]: Traceback (most recent call last):",
          '[rank0]:   File "/work/train.py", line 10, in <module>',
          "[rank0]:     assert batch.shape[0] == 32", "[rank0]: AssertionError",
          "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB."]
    assert [f.category for f in diagnose(tb)] == ["script_error", "oom_cuda_error"]


def test_a_cut_before_a_space_and_behind_pdsh_names_is_joined():
    """A healthy two-node deepspeed run relayed by pdsh, copied from a terminal that cut every
    row at 100 columns (one cut falls before a space): the launch command is read whole, not as
    a row that ends in an empty `--master_addr=`."""
    log = FIXTURES / "diagnose" / "healthy13" / "gh-aws-hpc-tutorials-batch-mnp-deepspeed-pdsh-2node.log"
    text = body(log.read_text(encoding="utf-8"))
    rows = [ln[i:i + 100] for ln in text.splitlines() for i in range(0, max(len(ln), 1), 100)]
    assert any(r.endswith("--master_addr=") for r in rows) and any(r[:2] == " -" for r in rows)
    assert [f.id for f in diagnose(rows)] == []


def test_a_refused_connection_inside_torch_distributed_on_windows_is_the_master():
    got = diagnose(['  File "C:\\\\py\\\\lib\\\\site-packages\\\\torch\\\\distributed\\\\rendezvous.py", '
                    'line 189, in _create_c10d_store',
                    "ConnectionRefusedError: [WinError 10061] 由于目标计算机积极拒绝，无法连接。"])
    assert got and got[0].id == "master-refused-connection", [f.id for f in got]


@pytest.mark.parametrize("lines", [
    # round nine's review: lines of working runs that its rules had made causes
    ["node1:1:1 [0] NCCL INFO NET/IB: Ip address '10.10.0.0/33' is invalid for family AF_INET, "
     "ignoring address", "node1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE"],
    ["2025-01-01 10:00:00 - WARNING - accelerate.accelerator - A wrapped DeepSpeed engine "
     "reference is currently tied for this `Accelerator()` instance."],
    ["UserWarning: Plan failed with a CuDNNError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
     "epoch 1 loss 0.3"],
    ["sshd[1234]: Invalid user admin from 45.1.2.3 port 51234"],
    ["[W socket.cpp:697] [c10d] The IPv6 network addresses of (DESKTOP-ABC, 29500) cannot be "
     "retrieved (gai error: 11001 - No such host is known.)",
     "[W socket.cpp:697] [c10d] The client socket has failed to connect to [node1]:29500 "
     "(system error: 10065 - A socket operation was attempted to an unreachable host.)",
     "[I socket.cpp:810] [c10d] The client socket has connected to [node1]:29500 on "
     "[DESKTOP-ABC]:51234.", "epoch 1 loss 0.3"],
    ["$ torchrun --nproc_per_node 2 train.py", "wandb: Network error (ConnectionError)",
     "ConnectionRefusedError: [Errno 111] Connection refused", "epoch 1 loss 0.3"],
    ["/workspace/entrypoint.sh: line 3: ulimit: max locked memory: cannot modify limit: "
     "Operation not permitted", "epoch 1 loss 0.3"],
])
def test_round_nine_lines_of_working_runs_are_no_cause(lines):
    assert causes(lines) == []


@pytest.mark.parametrize("line, wanted", [
    ("node1:1:1 [0] NCCL WARN NET/IB : Remote IB device is incompatible with the local "
     "[0]mlx5_bond_0:1/RoCE. Try selecting NICs of only one link type using NCCL_IB_HCA",
     "nccl-ib-link-layer-mismatch"),
    ("No sockets were able to be opened on the available protocols", "openmpi-tcp-interface-params-invalid"),
    ("ValueError: Cannot use ReduceOp AVG with XCCL", "pg-backend-lacks-op"),
    ("RuntimeError: module must have its parameters and buffers on device cuda:0 (device_ids[0]) "
     "but found one of them on device: cpu", "dataparallel-module-not-on-first-device"),
    ('RuntimeError: NVML_SUCCESS == r INTERNAL ASSERT FAILED at "/opt/conda/conda-bld/pytorch_1/'
     'work/c10/cuda/CUDACachingAllocator.cpp":830, please report a bug to PyTorch.', "cuda-out-of-memory"),
    ("RuntimeError: Workspace can't be allocated, not enough memory", "cuda-out-of-memory"),
    ("node1:1:1 [0] include/alloc.h:53 NCCL WARN Failed to CUDA host alloc 4923392 bytes",
     "nccl-host-alloc-failed"),
    ("/tmp/torchinductor_root/ab/cabxyz.py:24: unknown: block: [0,0,0], thread: [64,0,0] "
     "Assertion `index out of bounds: 0 <= tmp4 < 32000` failed.", "cuda-device-side-assert"),
    ("sudo: a password is required", "sudo-needs-password-or-tty"),
    ("node1: bash: line 0: cd: /work/dir: No such file or directory", "remote-working-directory-missing"),
    ("RuntimeError: pidfd_getfd: Operation not permitted", "expandable-segments-shared-between-processes"),
])
def test_round_nine_families_after_review(line, wanted):
    got = diagnose([line])
    assert got and got[0].id == wanted, [(f.id, f.category) for f in got]


@pytest.mark.parametrize("lines", [
    # round ten's review: lines of working runs that its rules had made causes
    ["[rank0]:[titan] 2025-06-12 10:15:30,118 - root - WARNING - Dataset c4 has run out of data. "
     "This might cause NCCL timeout if data parallelism is enabled.", "step 100 loss 2.0"],
    ["fi_getinfo: -61"],
    ["Environment variable SAGEMAKER_INSTANCE_TYPE is not set", "epoch 1 loss 0.3"],
    ["WARNING: on rank 1 (TP, PP, encoder TP, encoder PP) mismatch after resume ((4, 1, 0, 0) vs "
     "(2, 1, 0, 0) from checkpoint): Rerun state will be ignored", "iteration 10 loss 2.0"],
    ["  File \"/usr/lib/python3.10/multiprocessing/reduction.py\", line 164, in recvfds"],
    ["frame #3: gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::duration<long, "
     "std::ratio<1l, 1000l> >) + 0x2f3 (0x7f in /usr/lib/libtorch_cpu.so)"],
])
def test_round_ten_lines_of_working_runs_are_no_cause(lines):
    assert causes(lines) == []


@pytest.mark.parametrize("line, wanted", [
    ('  File "C:\\py\\lib\\site-packages\\torch\\cuda\\__init__.py", line 404, in set_device',
     "set-device-frames"),
    ("frame #6: c10d::TCPStore::TCPStore(std::string, c10d::TCPStoreOptions const&) + 0x20c (0x7f in "
     "/usr/lib/libtorch_cpu.so)", "rendezvous-store-frames"),
    ("ValueError: Provided py_version py38 is not supported by torch_distributed.",
     "managed-platform-distribution-rejected"),
    ("SSH daemon not found, please install SSH to allow MPI to communicate different nodes in "
     "cluster.", "sshd-missing-in-image"),
    ("node1:1:1 [0] NCCL WARN unix client /run/tcpx/get_gpu_fd_0000:04:00.0, gpumem fd client "
     "connect failed unix client connect() error: 2", "gpudirect-tcpx-rxdm-missing"),
    ("ValueError: No samples found in dataset; perhaps you have fewer shards than workers.",
     "distributed-data-sharding-misuse"),
    ("_pickle.UnpicklingError: Weights only load failed. In PyTorch 2.6, we changed the default "
     "value of the `weights_only` argument in `torch.load` from `False` to `True`.",
     "torch-load-weights-only-default"),
    ("ValueError: Expected 16 of '*_optim_states.pt' under '/ckpt/global_step1000' but found 8 "
     "files.", "deepspeed-checkpoint-shards-missing"),
    ("ValueError: The last_call timeout (0:00:00) must be positive.", "launcher-option-malformed"),
    ("nc: connect to node1 port 29500 (tcp) failed: Connection refused", "probe-port-refused"),
    ("nc: connect to node1 (10.0.0.1) port 29500 (tcp) timed out: Operation now in progress",
     "probe-port-filtered"),
    ("modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
     "nvidia-driver-not-loaded"),
    ("RuntimeError: Invalid value for environment variable: TORCH_NCCL_ASYNC_ERROR_HANDLING",
     "env-var-value-invalid"),
])
def test_round_ten_and_eleven_families(line, wanted):
    got = diagnose([line])
    assert got and got[0].id == wanted, [(f.id, f.category) for f in got]


@pytest.mark.parametrize("lines", [
    # round eleven's review: banners, warnings and probes of working machines
    ["ERROR: This container was built for NVIDIA Driver Release 550.54 or later, but",
     "CUDA Forward Compatibility mode ENABLED."],
    ["WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available."],
    ["libgomp: Invalid value for environment variable OMP_NUM_THREADS", "epoch 1 loss 0.3"],
    ["[1700000000.1] [node1:2345 :0]  ucp_context.c:1321 UCX  WARN  transport 'cuda_copy' is not "
     "available, please use one or more of: cma, rc, self"],
    ["(autoscaler +2s) Warning: The following resource request cannot be scheduled right now: "
     "{'CPU': 1.0, 'GPU': 1.0}."],
    ["nc: connect to node1 port 29500 (tcp) failed: Connection refused",
     "Connection to node1 29500 port [tcp/*] succeeded!"],
    ["** server can't find node2.default.svc.cluster.local: NXDOMAIN", "Name:\tnode2", "Address: 10.0.0.2"],
    ["Unit sshd.service could not be found."],
    ['Device "eth1" does not exist.'],
])
def test_round_eleven_lines_of_working_machines_are_no_cause(lines):
    assert causes(lines) == []


@pytest.mark.parametrize("line", [
    "#4  0x00007f3a1c9e2b1c in c10d::ProcessGroupNCCL::ncclCommWatchdog() () from libtorch_cuda.so",
    "#4  0x00007f3a1c9e2b1c c10d::ProcessGroupNCCL::ncclCommWatchdog()",
    "frame #4: 0x00007f3a1c9e2b1c libtorch_cuda.so`c10d::ProcessGroupNCCL::ncclCommWatchdog()",
])
def test_an_idle_watchdog_thread_in_a_debuggers_dump_is_no_cause(line):
    assert causes([line, "epoch 1 loss 0.3"]) == []


def test_the_watchdog_in_an_exceptions_trace_is_still_read():
    got = diagnose(["terminate called after throwing an instance of 'c10::DistBackendError'",
                    "frame #4: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x8e (0x7f in "
                    "/usr/lib/libtorch_cuda.so)"])
    assert "nccl-watchdog-stack-frames" in [f.id for f in got]


# ---- unseen25 (forums, engineers' write-ups): what its first look found missing ----------------

ENDPOINT_CONFIG = ["INFO:torch.distributed.launcher.api:Starting elastic_operator with launch configs:",
                   "  min_nodes        : 2", "  max_nodes        : 2", "  rdzv_backend     : c10d",
                   "  rdzv_endpoint    : node-a"]


@pytest.mark.parametrize("done", [
    "INFO:torch.distributed.elastic.agent.server.api:[default] Rendezvous complete for workers. Result:",
    "I1203 dynamic_rendezvous.py:1191] The node 'b_17_0' has joined round 0 of the rendezvous 'j' as rank 1 in a world of size 2.",
    "INFO:torch.distributed.distributed_c10d:Rank 3: Completed store-based barrier for key:store_based_barrier_key:1 with 8 nodes.",
])
def test_an_endpoint_without_port_is_no_finding_once_the_rendezvous_went_through(done):
    assert diagnose(ENDPOINT_CONFIG + [done, "[RANK 0] Epoch 0 | Batchsize: 32 | Steps: 8"]) == []


def test_an_endpoint_without_port_is_still_offered_where_the_rendezvous_never_completed():
    got = diagnose(ENDPOINT_CONFIG)
    assert [f.id for f in got] == ["rdzv-endpoint-without-port"]
    got = diagnose(ENDPOINT_CONFIG + ["torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"])
    assert "rdzv-endpoint-without-port" in [s["signature"] for s in got[0].evidence["supporting"]]


WATCHDOG_FRAMES = [
    "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::finishedGPUExecutionInternal() const + 0x5a (0x7f01 in /opt/torch/lib/libtorch_cuda.so)",
    "frame #2: c10d::ProcessGroupNCCL::workCleanupLoop() + 0x11d (0x7f02 in /opt/torch/lib/libtorch_cuda.so)",
]


@pytest.mark.parametrize("first", [
    ["terminate called after throwing an instance of 'c10::CUDAError'", "  what():  CUDA error: unknown error"],
    ["terminate called after throwing an instance of 'c10::DistBackendError'",
     "  what():  [PG 0 Rank 5] Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered"],
])
def test_a_cuda_error_surfacing_on_the_watchdog_thread_is_not_a_timeout(first):
    got = diagnose(first + WATCHDOG_FRAMES)
    assert got and got[0].category == "oom_cuda_error"
    assert "nccl-watchdog-stack-frames" not in [f.id for f in got]


def test_a_cuda_fault_reported_through_nccl_on_the_watchdog_thread_is_not_a_timeout():
    got = diagnose(["terminate called after throwing an instance of 'c10::DistBackendError'",
                    "  what():  [PG 0 Rank 5] Process group watchdog thread terminated with exception: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
                    "ncclUnhandledCudaError: Call to CUDA function failed.", "Last error:",
                    "Cuda failure 'unknown error'"] + WATCHDOG_FRAMES)
    assert got[0].category != "nccl_timeout_or_desync"
    assert "nccl-watchdog-stack-frames" not in [f.id for f in got]


def test_the_watchdog_frames_of_a_timeout_still_count():
    got = diagnose(["terminate called after throwing an instance of 'c10::DistBackendError'",
                    "  what():  [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."] + WATCHDOG_FRAMES)
    assert got[0].category == "nccl_timeout_or_desync"


@pytest.mark.parametrize("stack", [
    ['Thread 4242 (idle): "MainThread"', "    wait (threading.py:320)", "    get (queue.py:180)",
     "    _try_get_data (torch/utils/data/dataloader.py:1133)",
     "    _next_data (torch/utils/data/dataloader.py:1295)", "    train_one_epoch (train.py:88)"],
    ["Thread 0x00007f (most recent call first):",
     '  File "/usr/lib/python3/site-packages/torch/utils/data/dataloader.py", line 1133 in _try_get_data',
     '  File "/work/train.py", line 88 in train_one_epoch'],
    ['Thread 4243 (active): "MainThread"', "    all_reduce (torch/distributed/distributed_c10d.py:2050)",
     "    reduce_metrics (metrics.py:40)", "    evaluate (train.py:120)", "    main (train.py:200)"],
    ["Thread 0x00007e (most recent call first):",
     '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 3316 in barrier',
     '  File "/work/trainer.py", line 410 in save_checkpoint'],
])
@pytest.mark.parametrize("filler", [0, 70])  # after the first lines, read one by one anyway
def test_a_hung_runs_stack_in_its_dataloader_or_evaluation_points_to_a_desync(stack, filler):
    lines = (["NCCL INFO Connected all rings"] + [f"epoch 0 iter {k} loss 0.5" for k in range(filler)]
             + stack + ["    <module> (train.py:300)"])  # (the log's last line is read anyway)
    assert diagnose_report(lines, hung=True).findings[0].category == "nccl_timeout_or_desync"
    # a stack is no failure by itself: without the hang no cause is found (faulthandler's
    # frames are read as a traceback that lost its exception: `unknown` with its lines)
    assert causes(lines) == []


# ---- unseen26 (troubleshooting pages and notes kept on GitHub) ------------------------------------

@pytest.mark.parametrize("error", [
    "RuntimeError: Tensors must be contiguous",
    "ValueError: Tensors must be non-overlapping and dense",
    "RuntimeError: Tensor list operands to scatter/gather must have the same length",
    "RuntimeError: input tensor has to be contiguous",
    "ValueError: Tensor list must be nonempty",
    "ValueError: ProcessGroupGloo::allgather: invalid tensor size at index 0 (expected (2049), got (1, 2049))",
    "TypeError: Tensors must have identical strides",
    "RuntimeError: All tensor operands to scatter/gather must have the same number of elements",
    "ValueError: Tensors must be XPU and dense",
])
def test_a_collective_refusing_its_tensors_is_a_misuse_of_the_api(error):
    got = diagnose(["Traceback (most recent call last):",
                    '  File "train.py", line 40, in <module>',
                    "    dist.all_gather(outs, feats.t())",
                    '  File "/opt/torch/distributed/distributed_c10d.py", line 2615, in all_gather',
                    "    work = default_pg.allgather([tensor_list], [tensor])", error])
    assert got[0].category == "ddp_usage_error"


@pytest.mark.parametrize("error", ["RuntimeError: Tensors must be contiguous",
                                   "RuntimeError: input tensor has to be contiguous"])
def test_a_kernels_own_contiguity_check_is_no_collective_misuse(error):
    """A custom kernel (Triton, DCNv2) checks its inputs with the same words, in a DDP run whose
    log is full of NCCL lines and collectives' names."""
    got = diagnose(["node1:1:1 [0] NCCL INFO Broadcast: opCount 0 sendbuff 0x7f recvbuff 0x7f",
                    "node1:1:1 [0] NCCL INFO comm 0x55 rank 0 nranks 2 - Init COMPLETE",
                    "Traceback (most recent call last):",
                    '  File "/work/model.py", line 12, in forward', "    y = dcn_v2_conv(x.t(), w)",
                    '  File "/opt/DCNv2/dcn_v2.py", line 31, in forward', "    out = _backend.forward(x)",
                    error])
    assert "ddp_usage_error" not in [f.category for f in got]


def test_the_ofi_plugin_failing_where_there_is_no_efa_is_routine():
    lines = [
        "node1:101:201 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):208 NCCL WARN NET/OFI Failed to initialize rdma protocol",
        "node1:101:201 [0] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):353 NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
        "node1:101:201 [0] ncclResult_t nccl_net_ofi_init_v6(ncclDebugLogger_t):162 NCCL WARN NET/OFI Initializing plugin failed",
        "node1:101:201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>",
        "node1:101:201 [0] NCCL INFO Using network Socket",
        "{'loss': 1.93, 'learning_rate': 2e-05, 'epoch': 0.1}",
    ]
    assert diagnose(lines) == []


def test_a_coloured_py_spy_frame_is_read_after_the_first_lines():
    """py-spy colours a frame's parts on a terminal; the colour codes split the frame's words."""
    lines = ([f"epoch 0 iter {k} loss 0.5" for k in range(70)]
             + ['Thread 77 (idle): "MainThread"',
                "    \x1b[32m_try_get_data\x1b[0m (\x1b[36mtorch/utils/data/dataloader.py\x1b[0m:1133)",
                "    \x1b[32mtrain_one_epoch\x1b[0m (\x1b[36mtrain.py\x1b[0m:88)"])  # (not the last line)
    assert diagnose_report(lines, hung=True).findings[0].category == "nccl_timeout_or_desync"


def test_a_logging_format_that_names_the_function_is_no_stack():
    """`%(funcName)s (%(filename)s:%(lineno)d): %(message)s` prints `evaluate (train.py:120): ...`
    on a healthy run: not a frame of a hung rank."""
    lines = ["node1:1:1 [0] NCCL INFO NET/Socket : Using [0]docker0:172.17.0.2<0>",
             "evaluate (train.py:120): eval loss 0.31"]
    ids = [s["signature"] for f in diagnose_report(lines, hung=True).findings
           for s in f.evidence.get("supporting", [])]
    assert "hang-stack-in-eval-or-save" not in ids


def test_the_ofi_plugins_fallback_still_weighs_when_a_run_across_nodes_hung():
    lines = ["node1:101:201 [0] ncclResult_t nccl_net_ofi_init_v6(ncclDebugLogger_t):162 NCCL WARN NET/OFI Initializing plugin failed",
             "node1:101:201 [0] NCCL INFO NET/Socket : Using [0]eth0:10.1.2.3<0>",
             "node2:202:302 [8] NCCL INFO comm 0x55 rank 8 nranks 16 cudaDev 0 busId 1a000 - Init COMPLETE"]
    got = diagnose_report(lines, hung=True).findings
    ids = [s["signature"] for f in got for s in f.evidence.get("supporting", [])]
    assert "hang-ofi-plugin-fell-back" in ids


# ---- catalogue round 12: versions anywhere in the stack, the fabric below NCCL ---------------------

@pytest.mark.parametrize("line,category", [
    ("RuntimeError: The current installed version of g++ (13.2.0) is greater than the maximum required version by CUDA 12.1.", "version_mismatch"),
    ("RuntimeError: torch.compile is not supported on Python 3.13+", "version_mismatch"),
    ("ValueError: libcudnn.so.*[0-9] not found in the system path ['/usr/lib/python3.10']", "version_mismatch"),
    ("ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following error: you need flash_attn package version to be greater or equal than 2.1.0", "version_mismatch"),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5.", "version_mismatch"),
    ("A module that was compiled using NumPy 1.x cannot be run in", "version_mismatch"),
    ("ValueError: unsupported pickle protocol: 5", "version_mismatch"),
    ("torchaudio 2.1.0 requires torch==2.1.0, but you have torch 2.3.1 which is incompatible.", "version_mismatch"),
    ("RuntimeError: cannot load MPI library", "version_mismatch"),
    ("node3:77:90 [1] transport/net_ib.cc:95 NCCL WARN NET/IB : Got async event : port error", "nccl_interface_selection"),
    ("[2026-01-02 03:04:05] n1:1:2 [0] transport/net_ib/common.cc:134 NCCL WARN NET/IB : mlx5_2:1 Got non-fatal async event: port error(10)", "nccl_interface_selection"),
    ("n1:5:9 [0] NCCL WARN NET/IB : Got async event : local work queue catastrophic error", "nccl_interface_selection"),
    ("RuntimeError: Windows not yet supported for torch.compile", "version_mismatch"),
    ("ImportError: numpy.core.multiarray failed to import", "version_mismatch"),
    ("Failed to modify QP to RTR", "nccl_interface_selection"),
    ("[n1:4242] pml_ucx.c:424  Error: ucp_ep_create(proc=7) failed: Destination is unreachable", "nccl_interface_selection"),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:211] address family mismatch", "nccl_interface_selection"),
    ("[2025-06-12 10:15:42] n1:1:9 [0] misc/socket.cc:533 NCCL WARN socketFinalizeAccept from 10.0.0.7<51234>: wrong type 3 != 1", "port_in_use_or_firewall"),
])
def test_round_twelve_families(line, category):
    got = diagnose([line])
    assert got and got[0].category == category, [f.category for f in got]


@pytest.mark.parametrize("lines", [
    # DeepSpeed accepts a toolkit whose CUDA differs only in the minor release
    ["Installed CUDA version 12.2 does not match the version torch was compiled with 12.1 but since the APIs are compatible, accepting this combination"],
    # NCCL warns and goes on without the feature or plugin
    ["n1:1:1 [0] proxy.cc:800 NCCL WARN Unable to create thread context due to old driver, disabling."],
    ["n1:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol."],
    # c10d retries a connect until the master listens: the retry's "timed out" is no timeout of
    # the run for the rules that need one
    ["[W1203 12:00:35.1 socket.cpp:917] [c10d] The server socket on [node1]:29500 has timed out, will retry.",
     "W1203 12:00:00.1 2345 torch/distributed/run.py:854] master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified."],
    ["WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for a different version of PyTorch or Python.",
     "    PyTorch 2.1.0+cu121 with CUDA 1201 (you have 2.1.0+cu121)"],
    # after the review: lines of nodes and runs that go on
    ["libibverbs: Warning: no userspace device-specific driver found for /sys/class/infiniband_verbs/uverbs1"],
    ["\t\t\tstate:\t\t\tPORT_INIT (2)", "\t\t\tphys_state:\t\tPOLLING (2)"],
    ["n1:1:9 [0] misc/socket.cc:431 NCCL WARN socketFinalizeAccept: wrong magic 5448202f20544547 != 564ab9f2fc4b9d6c"],
    ["[node1:12345] pml_ucx.c:318  Error: Failed to create UCP worker"],
    ["libfabric:2345:1700000000::core:core:fi_getinfo_():1373<warn> fi_getinfo: provider efa returned -61 (No data available)"],
    ["[WARNING]  DeepSpeed Op Builder: Installed CUDA version 12.6 does not match the version torch was compiled with 12.1.Detected `DS_SKIP_CUDA_CHECK=1`: Allowing this combination of CUDA, but it may result in unexpected behavior."],
])
def test_round_twelve_lines_of_working_runs_are_no_cause(lines):
    assert causes(lines) == []


@pytest.mark.parametrize("noise", [
    "libibverbs: Warning: no userspace device-specific driver found for /sys/class/infiniband_verbs/uverbs1",
    "A module that was compiled using NumPy 1.x cannot be run in",
    "/usr/lib/python3.10/site-packages/torch/_subclasses/functional_tensor.py:258: UserWarning: Failed to initialize NumPy: _ARRAY_API not found (Triggered internally)",
    "torchvision 0.16.0 requires torch==2.1.0, but you have torch 2.2.1 which is incompatible.",
    "n1:1:9 [0] NCCL INFO HINT: In many cases this error occurs when the NCCL_IB_TIMEOUT is set too short.",
])
def test_round_twelve_noise_beside_a_real_failure_does_not_take_its_place(noise):
    """A warning a working run prints, in the log of a run that failed of something else (here a
    collective that timed out), never outranks that failure."""
    got = diagnose([noise, "[rank1]:[E1203 12:40:00.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
                           "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
                           "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."])
    assert got[0].category == "nccl_timeout_or_desync", [f.id for f in got]


# ---- session 7: a straggler in the host's own tables -------------------------------------------

PS_HEADER = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"
NCCL_ONE_NODE = ["node1:2207:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
                 "node1:2207:2290 [0] NCCL INFO comm 0x5581c0f0 rank 0 nranks 4 cudaDev 0 "
                 "nvmlDev 0 busId 1000 commId 0x9a1b7c3d5e - Init COMPLETE"]
BUSY = "| N/A   41C    P0   250W / 400W |  30000MiB / 81920MiB |    100%      Default |"
IDLE = "| N/A   30C    P0    60W / 400W |  29000MiB / 81920MiB |      0%      Default |"
UNUSED = "| N/A   28C    P0    52W / 400W |      4MiB / 81920MiB |      0%      Default |"
NCCL_FILLER = [f"node1:2207:2290 [{k % 4}] NCCL INFO Channel {k:02d}/0 : {k % 4}[{k % 4}] -> "
               f"{(k + 1) % 4}[{(k + 1) % 4}] via P2P/IPC/read" for k in range(200)]


def first_hang_cause(table: list[str], filler: list[str] = ()) -> str:
    """The top cause of a hang on one node of PCIe GPUs (P2P without the table), the host's
    table pasted after `filler`."""
    lines = ["NVIDIA GeForce RTX 4090"] + NCCL_ONE_NODE + list(filler) + table
    return diagnose_report(lines, hung=True).findings[0].category


@pytest.mark.parametrize("table", [
    [PS_HEADER, "ura81os   280058  117  4.6 17517200480 24494736 ? Dl  00:36 291:14 python",
     "ura81os   280059 87.9  4.4 17508566232 23526964 ? Rl  00:36 217:52 python"],
    [PS_HEADER, "alice     4242 12.0  1.5 9876543 123456 pts/1    D+   10:02   5:01 /usr/bin/python3.10 train.py",
     "alice     4243 99.0  1.5 9876543 123456 pts/1    Rl+  10:02   5:01 /usr/bin/python3.10 train.py"],
    [PS_HEADER, "alice     4242 12.0  1.5 9876543 123456 pts/1    Dl+  10:02   5:01  \\_ /opt/conda/bin/python -u train.py --local_rank=1",
     "alice     4241 99.0  1.5 9876543 123456 pts/1    Sl+  10:02   5:01  \\_ /opt/conda/bin/python -u train.py --local_rank=0"],
    ["    PID STAT CMD", "   4242 Dl   python train.py", "   4243 Rl   python train.py"],
    ["    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND",
     "   4242 alice     20   0   16.3g   2.1g 512000 D   0.0   1.7   5:01.12 pt_main_thread",
     "   4243 alice     20   0   16.3g   2.1g 512000 R 100.0   1.7   5:01.12 pt_main_thread"],
    [BUSY, IDLE, BUSY],
    [BUSY.replace("Default", "E. Process"), IDLE.replace("Default", "E. Process")],
])
@pytest.mark.parametrize("filler", [[], NCCL_FILLER])  # pasted after a long log, too
def test_a_hung_run_with_one_rank_elsewhere_in_ps_top_or_nvidia_smi_is_a_desync(table, filler):
    """A rank in uninterruptible sleep next to running ones, or one GPU holding a rank's memory
    idle next to GPUs spinning in NCCL's kernel: a straggler, not a blocked P2P path (where
    every GPU spins), even on one node of PCIe GPUs."""
    assert first_hang_cause([], filler) == "p2p_acs_iommu"  # without the table
    assert first_hang_cause(table, filler) == "nccl_timeout_or_desync"
    assert causes(NCCL_ONE_NODE + table) == []  # no hang, no cause


@pytest.mark.parametrize("table", [
    [BUSY, BUSY.replace("100%", " 99%")],  # every GPU spinning: the P2P picture
    [BUSY, BUSY, UNUSED, UNUSED],  # a 2-GPU job on a 4-GPU node: the idle ones hold no memory
    [IDLE.replace("29000MiB", "  500MiB"), BUSY],  # a snapshot taken at start-up
    # nvidia-smi's CSV: the 0 % may be a fan or the memory
    ["fan.speed [%], utilization.gpu [%]", "0 %, 100 %", "0 %, 100 %"],
    [PS_HEADER, "alice     4242 99.0  1.5 9876543 123456 pts/1    Rl+  10:02   5:01 python train.py",
     "root      1234  0.0  0.1  30000  9000 ?        Ds   May01   0:00 /usr/bin/python3 /usr/share/unattended-upgrades/unattended-upgrade-shutdown",
     "alice     4300  0.5  0.1  30000  9000 pts/2    D+   10:03   0:01 python -m tensorboard.main --logdir runs",
     "alice     4200  0.1  0.1  30000  9000 pts/1    D+   10:02   0:01 /usr/bin/python3 /usr/local/bin/torchrun --nproc_per_node 2 train.py",
     "alice     4244  0.0  0.0   8000   900 pts/1    D    10:02   0:00 rsync -a ckpt/ backup/"],
    # every rank in D: a wedged driver or file system under all of them, no straggler
    [PS_HEADER, "alice     4242 12.0  1.5 9876543 123456 pts/1    Dl+  10:02   5:01 python train.py",
     "alice     4243 12.0  1.5 9876543 123456 pts/1    Dl+  10:02   5:01 python train.py"],
])
def test_tables_without_a_straggler_leave_the_p2p_hang_first(table):
    assert first_hang_cause(table) == "p2p_acs_iommu"


# ---- unseen29 (issue threads of mid-size projects, engineers' notes, READMEs) ---------------------

NO_SYNC = "AssertionError: no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage 2"


@pytest.mark.parametrize("caller", [
    ['  File "/env/lib/python3.9/site-packages/accelerate/accelerator.py", line 1057, in accumulate',
     "    cm_stack.enter_context(contextlib.nullcontext() if self.sync_gradients else self.no_sync(m))",
     '  File "/env/lib/python3.9/site-packages/accelerate/accelerator.py", line 947, in no_sync'],
    ['[rank2]:   File "/env/lib/python3.10/site-packages/transformers/trainer.py", line 2480, in _inner_training_loop',
     "[rank2]:     with context():"],
])
def test_deepspeeds_no_sync_assertion_called_by_accelerate_or_the_trainer_is_a_version_pair(caller):
    lines = ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>'] + caller + [
        '  File "/env/lib/python3.9/site-packages/deepspeed/runtime/engine.py", line 2397, in no_sync',
        "    assert not self.zero_optimization_partition_gradients(), \\", NO_SYNC]
    assert causes(lines)[0] == "version_mismatch"
    # the user's own code calling engine.no_sync() is a misuse of DeepSpeed's API
    own = ["Traceback (most recent call last):", '  File "train.py", line 88, in <module>',
           "    with engine.no_sync():",
           '  File "/env/lib/python3.9/site-packages/deepspeed/runtime/engine.py", line 2397, in no_sync',
           NO_SYNC]
    assert causes(own)[0] == "ddp_usage_error"


def test_a_device_mesh_that_cannot_lay_out_the_ranks_is_a_launch_layout_problem():
    reshape = ("RuntimeError: cannot reshape tensor of 0 elements into shape [-1, 0] because the "
               "unspecified dimension size -1 can be any value and is ambiguous")
    lines = ['  File "/workspace/verl/workers/fsdp_workers.py", line 140, in __init__',
             "    self.ulysses_device_mesh = init_device_mesh(",
             '  File "/usr/lib/python3.10/site-packages/torch/distributed/device_mesh.py", line 530, in _init_process_groups',
             "    pg_ranks_by_dim = self.mesh.swapdims(-1, dim).reshape(", reshape]
    assert causes(lines)[0] == "launcher_misuse"
    # the same words from the user's own tensors are an ordinary error of the script
    own = ["Traceback (most recent call last):", '  File "model.py", line 40, in forward',
           "    x = x.reshape(-1, self.heads)", reshape]
    assert "launcher_misuse" not in causes(own)


def test_torchs_collective_shape_check_names_a_desync():
    lines = ['  File "/opt/torch/distributed/distributed_c10d.py", line 1536, in all_reduce',
             "    work = default_pg.allreduce([tensor], opts)",
             "RuntimeError: Error when verifying shape tensors for collective ALLREDUCE on rank 0. "
             "This likely indicates that input shapes into the collective are mismatched across "
             "ranks. Got shapes:  10"]
    assert causes(lines)[0] == "nccl_timeout_or_desync"


def watchdog(rank: int, seq: int = 1, op: str = "BROADCAST", numel: int = 131072000,
             last: int = -1) -> list[str]:
    return [f"[rank{rank}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {rank}] Watchdog "
            f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn={numel}, "
            f"NumelOut={numel}, Timeout(ms)=600000) ran for 600023 milliseconds before timing out.",
            f"[rank{rank}]:[E1218 20:27:21.484910731 ProcessGroupNCCL.cpp:2168] [PG ID 1 PG GUID 1 Rank "
            f"{rank}]  failure detected by watchdog at work sequence id: {seq} PG status: last "
            f"enqueued work: {seq + 3}, last completed work: {last}"]


@pytest.mark.parametrize("hung", [False, True])
def test_every_rank_timing_out_in_the_first_collective_is_the_transport_not_a_desync(hung):
    """All ranks reached the run's first collective (the same op and size) and none ever
    completed one: nobody was elsewhere. One node: P2P first; several: the network."""
    lines = watchdog(0) + watchdog(1)
    got = [f.category for f in diagnose_report(lines, hung=hung).findings]
    assert got[0] == "p2p_acs_iommu" and "nccl_timeout_or_desync" in got, got
    nodes = ["torchrun --nnodes=2 --nproc_per_node=1 --rdzv_endpoint=node1:29500 train.py"] + lines
    assert diagnose_report(nodes, hung=hung).findings[0].category == "nccl_interface_selection"


@pytest.mark.parametrize("lines", [
    watchdog(1, 2, "ALLREDUCE") + watchdog(2, 2, "ALLREDUCE") + watchdog(3, 2, "ALLREDUCE"),  # rank 0 elsewhere
    watchdog(0) + watchdog(1, 2, "ALLREDUCE", 10, 1),  # the ranks in different collectives
    watchdog(0, 6, last=5) + watchdog(1, 6, last=5),  # five collectives went through
    watchdog(0, numel=10) + watchdog(1, numel=20),  # one collective, different sizes: a desync
    # the communicator has four ranks: two of them never reached the collective
    ["node1:2207:2290 [0] NCCL INFO comm 0x5581c0f0 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId "
     "1000 commId 0x9a1b7c3d5e - Init COMPLETE"] + watchdog(0) + watchdog(1),
])
def test_watchdog_timeouts_that_leave_a_rank_elsewhere_stay_a_desync(lines):
    assert diagnose_report(lines).findings[0].category == "nccl_timeout_or_desync"



def test_ncclsocket_resets_are_not_the_tcpstore():
    """NCCL's own socket layer prints 'Connection reset by peer' when a peer's transport dies:
    that is a link or a dead rank, not the rendezvous host going away."""
    for line in ["socketProgressOpt: Call to recv from 10.1.0.3<33759> failed : Connection reset by peer",
                 "Call to send to 10.1.0.3<40125> failed : Connection reset by peer"]:
        assert "rendezvous_master_unreachable" not in causes([line]), line
    assert causes(["RuntimeError: Connection reset by peer"]) == ["rendezvous_master_unreachable"]


def subgroup_watchdog(rank: int, group_rank: int) -> list[str]:
    """A new_group's first collective timing out: `[rankK]:` the global rank, `[Rank N]` the
    rank inside the group, SeqNum counted per group."""
    return [f"[rank{rank}]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank {group_rank}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLGATHER, "
            "NumelIn=4096, NumelOut=8192, Timeout(ms)=600000) ran for 600023 milliseconds before timing out."]


@pytest.mark.parametrize("lines", [
    # rank 3 of four never reached the collective, so it printed no watchdog line
    ["torchrun --standalone --nproc_per_node=4 train.py"] + watchdog(0) + watchdog(1) + watchdog(2),
    # NCCL 2.19+ names the function before "comm": a communicator of four, two ranks timed out
    ["node1:2200:2290 [0] NCCL INFO ncclCommInitRank comm 0x5581c0f0 rank 0 nranks 4 cudaDev 0 "
     "nvmlDev 0 busId 1000 commId 0x9a1b7c3d5e - Init COMPLETE"] + watchdog(0) + watchdog(1),
    # a subgroup of global ranks 2 and 3
    subgroup_watchdog(2, 0) + subgroup_watchdog(3, 1),
    # losses printed first: the default group's collectives went through, a new group's hangs
    ["epoch 0 step 200 loss 2.113", "epoch 0 step 210 loss 2.087"] + watchdog(0) + watchdog(1),
    # torch 1.13 prints no size: the ranks may have passed different ones
    [line.replace(", NumelIn=131072000, NumelOut=131072000", "") for line in watchdog(0) + watchdog(1)],
])
def test_first_collective_timeouts_that_may_leave_a_rank_elsewhere_stay_a_desync(lines):
    for hung in (False, True):
        assert diagnose_report(lines, hung=hung).findings[0].category == "nccl_timeout_or_desync", lines


P2P_HANG = ["NVIDIA GeForce RTX 4090",
            "node1:2207:2290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
            "node1:2207:2290 [0] NCCL INFO comm 0x5581c0f0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 "
            "busId 1000 commId 0x9a1b7c3d5e - Init COMPLETE"]
PS_HEADER = "USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"
RANKS_RUNNING = [
    "alice     4241  101  3.1 31234560 4123456 pts/0  Rl+  10:02  42:01 python train.py --local_rank=0",
    "alice     4242  100  3.1 31234560 4123456 pts/0  Rl+  10:02  42:00 python train.py --local_rank=1"]


def gpu_row(mem: int, util: int) -> str:
    return f"| 30%   61C    P2             290W / 450W |  {mem}MiB / 24564MiB |    {util}%      Default |"


@pytest.mark.parametrize("table", [
    # another user's python in D
    [PS_HEADER] + RANKS_RUNNING + [
        "bob      17731  0.4  0.2 2345600 312340 pts/3    D    09:12   0:55 python3 preprocess.py --src /nfs/x"],
    # a DataLoader worker: the rank's command line, a fraction of its memory
    [PS_HEADER] + RANKS_RUNNING + [
        "alice     4301  2.3  1.1 28234560 1423456 pts/0  Dl+  10:03   1:10 python train.py --local_rank=0"],
    # top: the ranks are pt_main_thread, another user's python is in D
    ["    PID USER      PR  NI    VIRT    RES    SHR S  %CPU  %MEM     TIME+ COMMAND",
     "   4241 alice     20   0   31.2g   4.1g 512000 R 100.0   3.1  42:01.12 pt_main_thread",
     "   4242 alice     20   0   31.2g   4.1g 512000 R 100.0   3.1  42:00.80 pt_main_thread",
     "   6001 carol     20   0    5.1g   1.2g  41000 D   1.0   0.9   3:11.40 python"],
    # an idle GPU holding another job's memory, unlike the ranks'
    [gpu_row(21043, 100), gpu_row(21043, 100), gpu_row(15302, 0), gpu_row(3, 0)],
])
def test_rows_of_other_jobs_do_not_make_a_straggler(table):
    assert diagnose_report(P2P_HANG + table, hung=True).findings[0].category == "p2p_acs_iommu"
    # the same tables with a rank's own row in D or idle do
    if table[0] == PS_HEADER:
        rank_d = RANKS_RUNNING[:1] + [RANKS_RUNNING[1].replace("Rl+", "Dl+")]
        assert diagnose_report(P2P_HANG + [PS_HEADER] + rank_d, hung=True).findings[0].category \
            == "nccl_timeout_or_desync"
    if table[0].startswith("| "):
        idle = [gpu_row(21043, 100), gpu_row(20911, 0)]
        assert diagnose_report(P2P_HANG + idle, hung=True).findings[0].category \
            == "nccl_timeout_or_desync"


@pytest.mark.parametrize("category, log", [
    # nccl-tests failing on CUDA after MPI_Init went through: PMIx's lock warning was noise
    ("oom_cuda_error", [
        "[node1:08575] PMIX ERROR: ERROR in file gds_ds12_lock_pthread.c at line 168",
        "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 4294967296 step: 2(factor) warmup iters: 5",
        "# Using devices",
        "node1: Test CUDA failure common.cu:1045 'unknown error'"]),
    # `nvidia-smi -L` in one task of a job: that task was given no GPU
    # an old TCPStore whose MASTER_ADDR does not resolve, in the resolver's other words
    ("rendezvous_master_unreachable", [
        "    store = TCPStore(master_addr, master_port, world_size, start_daemon, timeout)",
        "ValueError: host not found: Temporary failure in name resolution"]),
    ("duplicate_gpu_or_wrong_device", [
        "PROC_ID=0 No devices found.",
        "PROC_ID=1 GPU 0: NVIDIA RTX A5000 (UUID: GPU-43f1fb2e-11d8-30c4-1b4a-70bd77fc7e54)"]),
])
def test_unseen31_families(category, log):
    assert causes(log)[0] == category


def test_pmix_store_error_without_a_run_is_still_named():
    assert causes(["[node1:08575] PMIX ERROR: ERROR in file gds_ds12_lock_pthread.c at line 168"]) \
        == ["shared_memory_docker"]


DEVICE_MESH_GUESS = ("/usr/lib/python3/torch/distributed/device_mesh.py:478: UserWarning: It seems "
                     "like you did not set/select the default device for the current process before "
                     "the DeviceMesh initialization or use a launcher (i.e. torchrun) which populates "
                     "`LOCAL_RANK` environment variable.")


def test_device_mesh_guess_alone_is_no_finding_but_supports_a_duplicate_gpu():
    """DeviceMesh's warning that it guessed the GPU (global_rank % GPUs per host) is right on a
    regular layout: alone it is nothing; beside NCCL's duplicate GPU it is that finding's fact."""
    assert diagnose(["step 1 loss 2.3", DEVICE_MESH_GUESS, "step 2 loss 2.1"]) == []
    found = diagnose([DEVICE_MESH_GUESS, "[rank1]: Last error:",
                      "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000"])
    assert found[0].category == "duplicate_gpu_or_wrong_device"
    assert [(e["line"], e["signature"]) for e in found[0].evidence["supporting"]] == [
        (3, "nccl-duplicate-gpu"), (1, "sharded-default-device-guessed")]


@pytest.mark.parametrize("lines, category", [
    # a fabric that is not up (Fabric Manager stopped, restarted without a GPU reset): the
    # machine's state, whatever NCCL or CUDA call hit it first
    (["n1:10:20 [1] transport/nvls.cc:223 NCCL WARN Cuda failure 999 'unknown error'"], "oom_cuda_error"),
    (["n1:10:20 [0] transport/nvls.cc:287 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast "
      "memory of size 2097152 : CUDA error 401 'the operation cannot be performed in the present "
      "state'.", "This is usually caused by a system or configuration error in the Fabric Manager "
      "or NVSwitches."], "oom_cuda_error"),
    (["test: Test CUDA failure common.cu:941 'system not yet initialized'"], "oom_cuda_error"),
    # what says version: NVLS refused as an invalid argument (a CUDA build newer than the
    # driver), Fabric Manager refusing a driver of another version
    (["n1:10:20 [0] transport/nvls.cc:254 NCCL WARN Cuda failure 1 'invalid argument'"], "version_mismatch"),
    (["nv-fabricmanager[104]: fabric manager NVIDIA GPU driver interface version 550.127.05 don't "
      "match with driver version 550.120. Please update with matching NVIDIA driver package."],
     "version_mismatch"),
])
def test_nvswitch_fabric_state_versus_versions(lines, category):
    assert diagnose(lines)[0].category == category


def test_deepspeed_no_sync_assertion_cut_before_its_message():
    """DeepSpeed 0.16's no_sync assertion reached from accelerate's no_sync, the log cut after
    the assertion's code line (transformers#34984's shape): releases that do not fit together."""
    log = ["Traceback (most recent call last):",
           '  File "/usr/lib/python3/site-packages/accelerate/accelerator.py", line 973, in no_sync',
           "    with context():",
           '  File "/usr/lib/python3/site-packages/deepspeed/runtime/engine.py", line 1995, in no_sync',
           "    assert not self.zero_optimization_partition_gradients(), \\"]
    assert diagnose(log)[0].category == "version_mismatch"


def test_an_envoy_sidecar_in_a_hung_run_is_the_network_in_the_way():
    log = ["Using distributed PyTorch with gloo backend",
           "2022-07-19T18:01:59.173796Z\tdebug\tenvoy connection\t[C72] remote early close",
           "2022-07-19T18:01:59.211667Z\tdebug\tenvoy upstream\tmembership update for TLS cluster "
           "inbound|23456|| added 0 removed 1"]
    found = diagnose_report(log, hung=True).findings
    assert found[0].category == "port_in_use_or_firewall" and "Istio" in found[0].title


@pytest.mark.parametrize("line", [
    "[2025-12-27 19:36:45][trainer][WARNING] - Batch 50: All samples have no valid instances",
    "WARNING: skipping batch 812: loss is NaN",
])
def test_a_skipped_batch_before_a_hang_points_at_the_rank_that_made_one_collective_fewer(line):
    log = ["Epoch 0:  30%|###  | 50/164 [01:07<02:33, 1.35s/it, loss=133]", line]
    assert diagnose_report(log, hung=True).findings[0].category == "nccl_timeout_or_desync"
    assert diagnose_report(["Epoch 0: 100%|#####| 164/164", line]).findings == []  # not hung


def test_fp16_overflow_skips_are_no_desync():
    """apex/DeepSpeed skip a step on every rank at once after a gradient overflow."""
    log = ["Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 32768.0",
           "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536"]
    used = [e["signature"] for f in diagnose_report(log, hung=True).findings
            for e in f.evidence.get("supporting", [])]
    assert "hang-rank-skipped-a-batch" not in used


CROSS_DEVICE = ("RuntimeError: Expected all tensors to be on the same device, but found at least "
                "two devices, cuda:0 and cuda:1!")


@pytest.mark.parametrize("command, category", [
    # one process for eight GPUs: the model spread over them
    (["export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7", "python src/train_sft.py \\"], "launcher_misuse"),
    (["$ CUDA_VISIBLE_DEVICES=0,1 python3 train.py --bf16"], "launcher_misuse"),
    # a launcher was used, or one GPU only: a device placed by hand in the script
    (["export CUDA_VISIBLE_DEVICES=0,1", "torchrun --nproc_per_node 2 train.py"],
     "duplicate_gpu_or_wrong_device"),
    (["CUDA_VISIBLE_DEVICES=1 python train.py"], "duplicate_gpu_or_wrong_device"),
])
def test_cross_device_tensors_after_a_plain_python_start_on_several_gpus(command, category):
    assert diagnose([*command, "Traceback (most recent call last):", CROSS_DEVICE])[0].category == category


def test_an_envoy_sidecar_in_a_run_that_works_is_no_finding():
    log = ["2022-07-19T18:01:59.211667Z\tdebug\tenvoy upstream\tmembership update for TLS cluster "
           "inbound|23456|| added 1 removed 0", "epoch 1 loss 0.52", "epoch 2 loss 0.31"]
    assert diagnose(log) == []


def test_peer_mapping_exhausted_is_the_eight_peer_limit_not_a_broken_link():
    top = diagnose(["RuntimeError: CUDA error: peer mapping resources exhausted"])[0]
    assert top.id == "cuda-too-many-peers" and "8 peer" in top.title and "num_processes" in top.fix


@pytest.mark.parametrize("platform_line", [
    '  File "C:\\Users\\frank\\anaconda3\\envs\\db\\lib\\site-packages\\pytorch_lightning\\trainer\\trainer.py", line 740, in fit',
    "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 27316) of binary: C:\\anaconda\\envs\\clip\\python.exe",
    '  File "/opt/homebrew/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 1268, in _new_process_group_helper',
])
def test_nccl_asked_for_on_windows_or_macos_is_the_backend_choice_not_the_wheel(platform_line):
    log = ["Traceback (most recent call last):", platform_line,
           "RuntimeError: Distributed package doesn't have NCCL built in"]
    top = diagnose(log)[0]
    assert top.category == "ddp_usage_error" and "gloo" in top.fix
    # on Linux the same line is a CPU-only (or NCCL-less) wheel
    linux = diagnose(['  File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", '
                      'line 1268, in _new_process_group_helper', log[-1]])
    assert linux[0].category == "version_mismatch"


@pytest.mark.parametrize("line, category", [
    # ZeRO-3 / FSDP on a torch whose NCCL group lacks the flat collectives
    ("RuntimeError: ProcessGroup nccl does not support _reduce_scatter_base", "version_mismatch"),
    ("RuntimeError: Backend nccl does not support allgather_into_tensor_coalesced", "version_mismatch"),
    # the same call on Gloo: the backend, not the release
    ("RuntimeError: Backend gloo does not support _reduce_scatter_base", "ddp_usage_error"),
])
def test_the_base_class_refusal_names_the_backend(line, category):
    assert diagnose(["Traceback (most recent call last):", line])[0].category == category


@pytest.mark.parametrize("line", [
    # HyperPyYAML (SpeechBrain) and OmegaConf read the command line as config overrides
    "KeyError: \"Override 'local-rank' not found in: ['seed', '__set_seed', 'debug', 'output_folder']\"",
    "omegaconf.errors.ConfigAttributeError: Key 'local_rank' is not in struct",
])
def test_a_config_system_rejecting_the_launchers_local_rank_is_the_launcher(line):
    log = ["FutureWarning: The module torch.distributed.launch is deprecated", "Traceback (most recent call last):",
           '  File "train.py", line 378, in <module>', line]
    top = diagnose(log)[0]
    assert top.category == "launcher_misuse" and "torchrun" in top.fix


def test_a_traceback_cut_off_in_set_device_names_the_device():
    log = ["Traceback (most recent call last):",
           '  File "/opt/app/train.py", line 358, in main',
           "    colossalai.launch_from_torch(config={})",
           '  File "/opt/conda/lib/python3.10/site-packages/colossalai/context/parallel_context.py", line 519, in set_device',
           "    torch.cuda.set_device(device_ordinal)"]
    top = diagnose(log)[0]
    assert top.category == "duplicate_gpu_or_wrong_device" and top.evidence["line"] == 4
    assert "LOCAL_RANK" in top.fix
    # the same frame with its error after it is not cut: the error line decides
    assert diagnose([*log, "RuntimeError: CUDA error: out of memory"])[0].category == "oom_cuda_error"


HUNG_AFTER_STEPS = [
    "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size",
    "      1/200      23G      1.663     0.9309   0.003412         40       1600: 95% 41/43 2.7it/s 15.5s<0.7s"]


def test_a_run_that_trained_before_it_hung_is_no_broken_transport():
    """Steps completed over the same GPUs and links: the first guesses are the ranks' code paths
    (a collective one rank skipped, DDP waiting for an unused parameter), not P2P or the NIC."""
    found = [f.category for f in diagnose_report(HUNG_AFTER_STEPS, hung=True).findings]
    assert found[:2] == ["nccl_timeout_or_desync", "ddp_usage_error"], found
    # hung before any step: the transport stays the first guess, DDP's reducer is no candidate
    cold = [f.category for f in diagnose_report(["NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>"],
                                                hung=True).findings]
    assert cold[0] == "p2p_acs_iommu" and "ddp_usage_error" not in cold


@pytest.mark.parametrize("command", [
    "CUDA_VISIBLE_DEVICES='0,1' python main.py --config cfg.yaml --nproc_per_node 8 --backend nccl",
    "CUDA_VISIBLE_DEVICES=3 torchrun --nproc-per-node=2 train.py",
    'CUDA_VISIBLE_DEVICES="0,1,2,3" torchrun --nnodes 1 --nproc_per_node 16 train.py',
])
def test_more_processes_than_the_command_shows_gpus_is_the_device(command):
    log = [command, "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:32, unhandled cuda error, NCCL version 2.4.8"]
    top = diagnose(log)[0]
    assert top.category == "duplicate_gpu_or_wrong_device" and "--nproc-per-node" in top.fix


@pytest.mark.parametrize("command", [
    "CUDA_VISIBLE_DEVICES=0,1 torchrun --nproc_per_node 2 train.py",  # as many as shown
    "CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --nproc_per_node=4 train.py",
])
def test_as_many_processes_as_gpus_is_no_device_finding(command):
    ids = [f.id for f in diagnose([command, "RuntimeError: NCCL error: unhandled cuda error"])]
    assert "nproc-exceeds-visible-gpus" not in ids
    assert diagnose([command, "epoch 1 loss 0.52"]) == []


@pytest.mark.parametrize("log", [
    ['    raise RuntimeError(f"NCCL error: {error_str}")',
     "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"],
    ["2025-08-14 12:08:39 - verifiers.inference.vllm_client - INFO - Initializing PyNcclCommunicator on device 0, rank 1, world_size 2",
     "INFO 08-14 12:08:39 [pynccl.py:70] vLLM is using nccl==2.26.2",
     "ERROR 08-14 12:08:39 [core.py:654] Invocation of collective_rpc method failed"],
])
def test_a_pynccl_weight_sync_that_fails_to_start_is_p2p(log):
    top = diagnose(log)[0]
    assert top.category == "p2p_acs_iommu" and "NCCL_P2P_DISABLE=1" in top.fix


def test_vllm_announcing_its_nccl_in_a_run_that_works_is_no_finding():
    assert diagnose(["INFO 07-23 20:47:08 pynccl.py:69] vLLM is using nccl==2.21.5",
                     "INFO 07-23 20:47:10 custom_all_reduce.py:111] Custom allreduce is disabled"]) == []


def test_one_wrapped_line_in_a_short_log_or_a_traceback_is_joined():
    """A forum wraps the one long error line of a short excerpt, or the watchdog's line after a
    traceback whose long frame lines are followed by their code: still read as one line."""
    from ddpkit.troubleshoot.diagnose.lines import rewrap
    short = ["ncclSystemError: System call (e.g. socket, malloc) or external library call failed",
             "or device error. Last error: Error while creating shared memory segment",
             "/dev/shm/nccl-kcXbUT (size 9637888)", "exitcode: 1"]
    joined = rewrap("\n".join(short)).split("\n")
    assert joined[0].endswith("(size 9637888)") and joined[1:] == ["", "", "exitcode: 1"]
    assert diagnose(short)[0].category == "shared_memory_docker"
    frame = '  File "/home/azureuser/trainer/scripts/training_test.py", line {}, in main'
    tb = ["Traceback (most recent call last):",
          frame.format(172), "    main(args)", frame.format(167), "    train(args.config)",
          frame.format(148), "    trainer.train_pipeline()",
          "[E ProcessGroupNCCL.cpp:587] [Rank 2] Watchdog caught collective operation",
          "timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1802157",
          "milliseconds before timing out."]
    assert "ran for 1802157 milliseconds" in rewrap("\n".join(tb)).split("\n")[7]
    assert diagnose(tb)[0].category == "nccl_timeout_or_desync"


def test_a_logging_level_line_is_never_the_rest_of_a_long_line():
    log = ["FileNotFoundError: [Errno 2] No such file or directory: 'E:/samsung/datasets/imagenetval/"
           "val5000/val_fullfilenames.pickle'",
           "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 6067)"]
    from ddpkit.troubleshoot.diagnose.lines import rewrap
    assert rewrap("\n".join(log)) == "\n".join(log)


def test_address_in_use_offers_the_jobs_own_second_copy_second():
    """Most often another job holds the port; a launch that started two rank-0 stores (the
    same node rank twice, a script that spawns under torchrun) is the second reading."""
    cats = [f.category for f in diagnose(["RuntimeError: Address already in use"])]
    assert cats[:2] == ["port_in_use_or_firewall", "launcher_misuse"]


def test_nccl_not_built_in_without_the_platform_offers_both_readings():
    cats = [f.category for f in diagnose(
        ["raise RuntimeError(\"Distributed package doesn't have NCCL \" \"built in\")"])]
    assert cats[:2] == ["version_mismatch", "ddp_usage_error"]


@pytest.mark.parametrize("log, first, second", [
    (["ncclInternalError: Internal check failed.",
      "NCCL error: internal error - please report this issue to the NCCL developers"],
     "nccl_interface_selection", "version_mismatch"),
    (["ValueError: You can't train a model that has been loaded with `device_map='auto'` in any "
      "distributed mode. Please rerun your script specifying `--num_processes=1`"],
     "ddp_usage_error", "launcher_misuse"),
    (["RuntimeError: CUDA error: peer mapping resources exhausted"], "p2p_acs_iommu", "launcher_misuse"),
    (["A process or daemon was unable to complete a TCP connection", "to another process:"],
     "port_in_use_or_firewall", "nccl_interface_selection"),
])
def test_an_error_with_two_usual_causes_names_both(log, first, second):
    cats = [f.category for f in diagnose(log)]
    assert cats[:2] == [first, second], cats


def test_not_enough_slots_under_horovodrun_is_its_host_syntax():
    slots = ["There are not enough slots available in the system to satisfy the 2 slots",
             "that were requested by the application:"]
    assert diagnose(["$ horovodrun -np 2 -H localhost python train.py", *slots])[0].category == "horovod_specific"
    assert diagnose(["$ mpirun -np 2 python train.py", *slots])[0].category == "launcher_misuse"


def test_a_store_that_could_not_listen_without_its_errno_is_still_the_port():
    log = ["The server socket has failed to listen on any local network address",
           "The server socket has failed to bind to [::]:19936"]
    cats = [f.category for f in diagnose(log)]
    assert cats[:2] == ["port_in_use_or_firewall", "launcher_misuse"], cats
    assert diagnose(log)[0].evidence["line"] == 1


def test_nccl_tests_listing_rank_0_on_two_hosts_ran_separate_tests():
    """Built without MPI=1, every process mpirun starts is rank 0 of its own test: the header
    says so even with no mpirun line and no summary in the excerpt."""
    apart = ["#   Rank  0 on ip-172-31-6-103 device  0 [0x00] Tesla M60",
             "#   Rank  0 on ip-172-31-12-213 device  0 [0x00] Tesla M60"]
    assert diagnose(apart)[0].category == "launcher_misuse"
    joined = ["#  Rank  0 Group  0 Pid  27998 on node-a device  0 [0x1b] NVIDIA A100-SXM4-80GB",
              "#  Rank  1 Group  0 Pid  27999 on node-b device  0 [0x1b] NVIDIA A100-SXM4-80GB"]
    assert diagnose(joined) == []
    # one host listed twice is one test's rank 0, not two tests
    assert diagnose(apart[:1] * 2) == []


@pytest.mark.parametrize("error, category", [
    ("RuntimeError: Trying to backward through the graph a second time (or directly access "
     "saved tensors after they have already been freed).", "ddp_usage_error"),
    ("ValueError: Attempting to unscale FP16 gradients.", "ddp_usage_error"),
    ("RuntimeError: Current CUDA Device does not support bfloat16. Please switch dtype to "
     "float16.", "version_mismatch"),
    ("RuntimeError: Optimizer state has not been consolidated on this rank. Please call "
     "`consolidate_state_dict(to=0)` on all ranks beforehand if you meant to save the global "
     "state.", "ddp_usage_error"),
])
def test_torch_refusing_how_the_training_step_uses_it_is_no_plain_script_error(error, category):
    """torch's checks of the step (autograd, GradScaler, bf16, sharded optimizers) name the
    usage, not a plain error of the user's script, even when the user's line raised it."""
    log = ["[rank1]: Traceback (most recent call last):",
           '[rank1]:   File "/work/train.py", line 88, in <module>',
           "[rank1]:     scaler.step(optimizer)", f"[rank1]: {error}"]
    assert diagnose(log)[0].category == category


def test_thc_reports_out_of_memory_before_the_exception():
    log = ["THCudaCheck FAIL file=/pytorch/aten/src/THC/generic/THCStorage.cu line=58 error=2 : "
           "out of memory"]
    assert diagnose(log)[0].category == "oom_cuda_error"


def test_set_epoch_on_a_plain_sampler_is_data_not_split_across_ranks():
    """Only DistributedSampler has set_epoch: the AttributeError shows a single-process loader
    under DDP, which is the usage, not a plain bug of the script."""
    log = ['  File "/work/run_downstream.py", line 212, in train',
           "    self.sampler.set_epoch(epoch)",
           "AttributeError: 'RandomSampler' object has no attribute 'set_epoch'"]
    assert diagnose(log)[0].category == "ddp_usage_error"
    # any other missing attribute stays the script's own error
    other = [*log[:2], "AttributeError: 'Trainer' object has no attribute 'set_epoch'"]
    assert diagnose(other)[0].category == "script_error"


def test_cudnn_finding_no_engine_is_the_library_or_gpu_it_runs_on():
    log = ['  File "/work/s2_train.py", line 375, in train_and_evaluate',
           "    scaler.scale(loss_disc_all).backward()",
           "RuntimeError: GET was unable to find an engine to execute this computation"]
    top = diagnose(log)[0]
    assert top.category == "version_mismatch"
    assert "LD_LIBRARY_PATH" in top.fix


@pytest.mark.parametrize("line, category", [
    # counts of the launch against the configuration, in words other than the catalogue's
    ("AssertionError: Total batch size (32) must be divisible by the number of gpus (6).", "launcher_misuse"),
    ("ValueError: the dataset length is less than the number of participating ranks.", "launcher_misuse"),
    ("RuntimeError: WORLD_SIZE must be set if --multiprocessing_distributed == true", "launcher_misuse"),
    # a companion library built for another torch or CUDA
    ("ImportError: torchaudio was built with CUDA 11.7", "version_mismatch"),
    ("AssertionError: MMCV==1.7.2 is used but incompatible. Please install mmcv>=2.0.0rc4, <2.2.0.",
     "version_mismatch"),
    ("ModuleNotFoundError: No module named 'horovod.torch'", "horovod_specific"),
    ("Failed to bind to 0.0.0.0:30050: Address already in use", "port_in_use_or_firewall"),
    ("ValueError: Mixed precision is not supported when using gradient checkpointing in distributed "
     "training.", "ddp_usage_error"),
])
def test_what_training_codebases_check_before_they_start_names_its_cause(line, category):
    """Recipes outside torch (speech, graphs, detection, diffusion) check the launch, the
    versions and the configuration themselves; each check names its cause in any project's words."""
    log = ["Traceback (most recent call last):", '  File "/work/train.py", line 40, in <module>',
           "    main()", line]
    assert diagnose(log)[0].category == category


def test_ssh_exit_255_with_the_remote_command_quoted_inside():
    line = ("Called process error Command 'ssh -o StrictHostKeyChecking=no -p 22 10.0.0.6 "
            "'cd /work; (export DGL_ROLE=server; python3 train_dist.py)'' returned non-zero exit "
            "status 255.")
    assert diagnose([line])[0].category == "ssh_failure"


@pytest.mark.parametrize("error", [
    "TypeError: init_distributed() got an unexpected keyword argument 'zero_level'",
    "TypeError: DistributedDataParallel.__init__() got an unexpected keyword argument 'init_sync'",
])
def test_a_set_up_call_rejecting_an_argument_is_the_library_release(error):
    log = ["Traceback (most recent call last):", '  File "/work/sft.py", line 163, in initialize',
           "    bmt.init_distributed(seed=args.seed, zero_level=3)", error]
    assert diagnose(log)[0].category == "version_mismatch"
    # the script's own function rejecting an argument is no release of anything
    own = [*log[:3], "TypeError: train_one_epoch() got an unexpected keyword argument 'scaler'"]
    assert "version_mismatch" not in [f.category for f in diagnose(own)]


def test_ascend_hccl_parameter_check_beats_the_watchdog_that_follows():
    """CANN's HCCL names the ranks out of step before torch_npu's watchdog reports the timeout."""
    log = ["[rank1]:EI0005: 2025-04-24-06:32:27.781.599 The arguments for collective communication are "
           "inconsistent between ranks:parameter count, local end 4096, remote end 2048",
           "[rank0]:[E ProcessGroupHCCL.cpp:806] Some HCCL operations have failed or timed out. Due to the "
           "asynchronous nature of ASCEND kernels, subsequent NPU operations might run on corrupted data."]
    cats = [f.category for f in diagnose(log)]
    assert cats[0] == "nccl_timeout_or_desync"
    assert diagnose(log)[0].evidence["line"] == 1


@pytest.mark.parametrize("line, category", [
    ("[ERROR] HCCL(2201,python3):2025-10-28-16:34:59.634.432 [sal.cc:501] [2201][InitGroupStage][EnvConfig]"
     "set ifname to [eth9] by HCCL_SOCKET_IFNAME, but no such interface", "nccl_interface_selection"),
    ("RuntimeError: NPU out of memory. Tried to allocate 1.50 GiB (NPU 0; 29.50 GiB total capacity)",
     "oom_cuda_error"),
    ("src/host/transport/transport.cpp:nvshmemi_transport_init:282: init failed for transport: IBGDA",
     "nccl_interface_selection"),
    ("src/host/mem/mem_heap.cpp:allocate_symmetric_memory:2266: nvshmem malloc failed (hint: check if total "
     "allocation has exceeded NVSHMEM symmetric size)", "oom_cuda_error"),
    ("2025:06:12-10:15:30:(811) |CCL_ERROR| internal_kvs.cpp:325 fill_local_host_ip: can't find interface "
     "ib0 to get host IP", "nccl_interface_selection"),
    ("RuntimeError: $PJRT_DEVICE is not set.", "launcher_misuse"),
])
def test_other_accelerators_and_comm_stacks_read_by_analogy(line, category):
    assert diagnose([line])[0].category == category


def test_an_hccl_error_raised_in_the_script_is_no_plain_script_error():
    log = ["Traceback (most recent call last):", '  File "/work/train.py", line 30, in <module>',
           "    dist.all_reduce(t)", "RuntimeError: HCCL function error: HcclAllReduce, error code is 9"]
    assert "script_error" not in [f.category for f in diagnose(log)]


@pytest.mark.parametrize("line", [
    "UserWarning: fused AdamW requires torch version >= 2.1; falling back to the foreach implementation",
    "WARNING: Gradient checkpointing is not supported in distributed training, disabling it",
    "UserWarning: FSDP is not applicable for single-GPU training. Reverting to DDP.",
])
def test_a_recipe_that_warns_and_goes_on_is_no_finding(line):
    """The recipes' refusals count when raised; the same words in a warning that falls back to
    another path are printed by runs that go on."""
    assert [f for f in diagnose([line]) if f.category != "unknown"] == []


@pytest.mark.parametrize("line, category", [
    # Megatron-style parallel degrees against the world, in words other than the catalogue's
    ("AssertionError: The nums of GPUs must be divisible by the pipeline parallel size 4 * tensor parallel "
     "size 2", "launcher_misuse"),
    ("RuntimeError: World size mismatch. Expected 32, but got 24", "launcher_misuse"),
    # a framework's own hang detector, a scheduler that cannot place the job, a PBS remote start outside it
    ("F1203 10:20:03.551020  3977 manager.cc:405] [RANK 7] Operator is hang, log stack", "nccl_timeout_or_desync"),
    ("comment = Can Never Run: Insufficient amount of resource: ngpus (R: 16 A: 8 T: 8)", "launcher_misuse"),
    ('pbs_tmrsh: host "gpu-node-03" is not a node in job <812.pbs01>', "launcher_misuse"),
    ("RuntimeError: status: Internal, message: \"lighthouse quorum failed after 5 retries.\"",
     "rendezvous_master_unreachable"),
])
def test_job_systems_and_their_frameworks_name_the_cause(line, category):
    assert diagnose([line])[0].category == category


def test_lines_that_say_info_or_set_a_timeout_satisfy_no_failure():
    """A rule that needs a failure beside it (NCCL bound to loopback) takes no INFO line with the
    word timeout, nor a setting such as `with timeout 1800 secs`, for one."""
    loopback = "node01:1297856:1297856 [0] NCCL INFO Bootstrap : Using [0]lo:127.0.0.1<0>"
    for beside in ("[INFO] [torchft::lighthouse] - Quorum status: Valid quorum with 3 participants, "
                   "waiting for 1 healthy but not participating stragglers due to join timeout",
                   "I1205 08:40:55.123 ProcessGroupUCC.cpp:597] Created ProcessGroupUCC with 8 ranks, "
                   "with timeout 1800 secs"):
        assert [f for f in diagnose([loopback, beside]) if f.category != "unknown"] == []
    failed = "RuntimeError: [1] is setting up NCCL communicator and connect() timed out"
    assert "nccl_interface_selection" in [f.category for f in diagnose([loopback, failed])]


@pytest.mark.parametrize("line, category", [
    # kernel libraries' floors and builds, in releases and numbers other than the catalogue's
    ("AssertionError: Device compute capability 9.0 or higher required for FP8 execution.", "version_mismatch"),
    ("RuntimeError: /workspace/te/common/ep/ep_backend.cpp:150 in function initialize: Assertion failed: "
     "nccl_version >= kMinNcclVersion. NCCL EP requires NCCL >= 2.31.0, found 2.26.2 at runtime.",
     "version_mismatch"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs: "
     "`cutlassF` is not supported because: xFormers wasn't build with CUDA support; operator wasn't built - "
     "see `python -m xformers.info` for more info", "version_mismatch"),
    ("RuntimeError: cuDNN Error: [cudnn_frontend] Error: No valid execution plans built.", "version_mismatch"),
    # the same faults through a library's own error macro, capitalised its own way
    ("RuntimeError: /te/userbuffers/userbuffers-host.cpp:612 in function create_communicator: CUDA Error: out "
     "of memory", "oom_cuda_error"),
    ("RuntimeError: /te/userbuffers/userbuffers-host.cpp:700 in function register_user_buffer_collective: No "
     "peer-to-peer access available between GPUs.", "p2p_acs_iommu"),
])
def test_kernel_libraries_name_the_cause(line, category):
    assert diagnose([line])[0].category == category


@pytest.mark.parametrize("line", [
    "UserWarning: Flash attention only supports gpu architectures in the range [sm80, sm100]. Attempting to run "
    "on a sm 6.1 gpu. (Triggered internally at /pytorch/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp:310.)",
    "WARNING[XFORMERS]: Need to compile C++ extensions to use all xFormers features.",
])
def test_a_kernel_that_falls_back_is_no_finding(line):
    """SDPA and xformers say which kernel they cannot use and go on with another: runs that train print it."""
    assert [f for f in diagnose([line]) if f.category != "unknown"] == []


def test_the_old_deprecation_notice_of_launch_is_no_rank_read_without_a_launcher():
    """torch.distributed.launch's notice says to read os.environ['LOCAL_RANK'] (without backticks
    before torch 2.0); a run that printed it and then failed failed of its own error."""
    notice = ["/usr/lib/python3/site-packages/torch/distributed/launch.py:181: FutureWarning: The module "
              "torch.distributed.launch is deprecated", "and will be removed in future. Use torchrun.",
              "If your script expects `--local-rank` argument to be set, please",
              "change it to read from os.environ['LOCAL_RANK'] instead. See"]
    failure = ["Traceback (most recent call last):", '  File "/work/train.py", line 12, in <module>',
               "    model.cuda()", "RuntimeError: CUDA error: no kernel image is available for execution on the "
               "device"]
    assert diagnose(notice + failure)[0].category == "version_mismatch"


RDZV_GONE = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to "
             "the C10d store has failed. See inner exception for details.")


@pytest.mark.parametrize("cause, category", [
    ("node1:2345:2345 [0] include/shm.h:26 NCCL WARN Unable to allocate shared memory (9637888 "
     "bytes) : No space left on device", "shared_memory_docker"),
    ("[rank1]: RuntimeError: CUDA error: out of memory", "oom_cuda_error"),
])
def test_the_store_gone_after_a_rank_failed_is_its_echo(cause, category):
    """The node that hosted the C10d store went down with its failed rank; the other nodes'
    agents then lose the store. The rank's own error comes first and is the answer."""
    found = diagnose([cause, RDZV_GONE])
    assert found[0].category == category
    assert "rendezvous_master_unreachable" in [f.category for f in found[1:]]


def test_the_store_gone_before_anything_else_is_the_rendezvous():
    assert diagnose([RDZV_GONE])[0].category == "rendezvous_master_unreachable"
    # printed first, it is no echo of what follows: it keeps a cause's confidence
    oom = "[rank1]: RuntimeError: CUDA error: out of memory"
    conf = {order: {f.category: f.confidence for f in diagnose(lines)}["rendezvous_master_unreachable"]
            for order, lines in (("first", [RDZV_GONE, oom]), ("after", [oom, RDZV_GONE]))}
    assert conf["first"] > 0.5 > conf["after"]


WATCHDOG = ("[rank0]:[E1201 10:00:05.123000 140 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600049 milliseconds before timing out.")
HEARTBEAT = ("[rank0]:[E1201 10:00:05.123000 140 ProcessGroupNCCL.cpp:1423] [PG 0 (default_pg) Rank 0] Heartbeat "
             "monitor timed out! Process will be terminated after dumping debug info.")
GLOO_WAIT = "[rank0]: RuntimeError: Timed out waiting 1800000ms for recv operation to complete"


NCCL_SYSTEM = ("[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled "
               "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
NCCL_CUDA = "[rank1]: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"


@pytest.mark.parametrize("first", [NCCL_SYSTEM, NCCL_CUDA, WATCHDOG, GLOO_WAIT])
@pytest.mark.parametrize("echo", [WATCHDOG, HEARTBEAT, GLOO_WAIT, RDZV_GONE])
def test_what_the_other_ranks_print_after_an_error_is_its_echo(first, echo):
    """A rank's error, even one that alone is only a symptom (NCCL's unhandled system error
    weighs less than a watchdog), then the other ranks' timeouts or the store gone with its
    node: the answer is the one the first error gives alone; of two echoes, the first."""
    alone = diagnose([first])[0].category
    found = diagnose([first, echo])
    assert found[0].category == alone, [f.id for f in found]


@pytest.mark.parametrize("echo", [WATCHDOG, HEARTBEAT, GLOO_WAIT])
def test_a_timeout_after_a_warning_is_no_echo_of_it(echo):
    """A warning a working run prints kills no rank: the timeout after it is the failure."""
    warning = ("/usr/lib/python3.10/site-packages/torch/_subclasses/functional_tensor.py:258: UserWarning: Failed "
               "to initialize NumPy: _ARRAY_API not found (Triggered internally)")
    assert diagnose([warning, echo])[0].category == "nccl_timeout_or_desync"
    # the timeout alone, with nothing before it, is a hang cut short: its causes follow it
    assert "nccl_timeout_or_desync" in [f.category for f in diagnose([echo])]


def test_nccl_errors_pointing_at_nccl_debug_info_are_first_errors():
    """NCCL's errors end "(run with NCCL_DEBUG=INFO for details)": that INFO is no log level,
    so the line is the rank's first error among the decisive lines."""
    line = "[rank1]: RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
    report = diagnose_report(["epoch 0 step 10 loss 2.31", line])
    assert any(d["why"].startswith("first error") and "unhandled cuda error" in d["text"]
               for d in report.decisive), report.decisive


@pytest.mark.parametrize("lines, category", [
    # a worker's store connection timing out, and Cilium dropping its SYN: the policy is why
    (["[W socket.cpp:601] [c10d] The client socket has failed to connect to [pytorchjob-master-0]:29500 "
      "(errno: 110 - Connection timed out).",
      "xx drop (Policy denied) flow 0x5c3a91f2 to endpoint 1843, ifindex 7, file bpf_lxc.c:2012, , identity "
      "48213->31877: 10.0.1.54:40112 -> 10.0.2.19:29500 tcp SYN"], "port_in_use_or_firewall"),
    # the worker's store connection reset by the Istio sidecar with no endpoint behind it
    (["torch.distributed.DistNetworkError: Connection reset by peer",
      "upstream connect error or disconnect/reset before headers. reset reason: connection failure"],
     "rendezvous_master_unreachable"),
    # NCCL's connection closed mid-run, on a pod network whose MTU exceeds the NIC's
    (["NCCL WARN Net : Connection closed by remote peer",
      "2024-06-11 09:10:02.118 [WARNING][61] felix/int_dataplane.go 1082: Configured MTU is larger than "
      "detected host interface MTU hostMTU=1450 mtu=1480"], "nccl_interface_selection"),
    (["Error: rootlessport listen tcp 0.0.0.0:29500: bind: address already in use"], "port_in_use_or_firewall"),
    (['error adding container to network "sriov-rdma-net": Could not allocate IP in range: ip: 192.168.100.1 '
      '/ - 192.168.100.14 / range: 192.168.100.0/28 / excludeRanges: []'], "nccl_interface_selection"),
])
def test_pod_networking_names_the_cause(lines, category):
    """Catalogue round eighteen: what Kubernetes, a mesh or a container runtime printed beside
    the ranks' errors names why the ranks could not connect."""
    assert diagnose(lines)[0].category == category



@pytest.mark.parametrize("prefix", [
    "2024-05-01 10:00:00,123 - root - ERROR - ",  # Python logging's common format
    "ERROR:root:",  # logging.basicConfig's default
    "[2024-05-01 10:00:00,123] [ERROR] [launch.py:321:main] ",  # DeepSpeed's logger
    "2024-05-01 10:00:00.123 | ERROR    | train:main:12 - ",  # loguru
    "ERROR 05-01 10:00:00 [worker.py:12] ",  # vLLM's logger
    "E0501 10:00:00.123456 12345 train.py:12] ",  # glog
    "[rank: 1] ",  # Lightning's rank_zero logger
])
@pytest.mark.parametrize("line, category", [
    ("horovodrun: error: the following arguments are required: -np/--num-proc", "launcher_misuse"),
    ("Failed to modify QP 4711 to RTR", "nccl_interface_selection"),
    ("AssertionError: Local rank mismatch", "launcher_misuse"),
])
def test_a_message_printed_through_a_logger_names_its_cause(prefix, line, category):
    """Rules that read a message from the start of its line read it after a logger's prefix too."""
    assert diagnose([prefix + line])[0].category == category


@pytest.mark.parametrize("lines, category, sid", [
    # pyxis could not import the image on one node: the registry's refusal is why
    (["slurmstepd: error: pyxis: child 2741 failed with error code: 1",
      "slurmstepd: error: pyxis: failed to import docker image",
      "slurmstepd: error: pyxis: printing enroot log file:",
      "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth returned error code: 401 Unauthorized",
      "srun: error: node02: task 0: Exited with exit code 1"], "launcher_misuse", "container-image-unavailable-on-node"),
    # Apptainer's --nv on a node without the driver, then torch finding no GPU
    (["WARNING: Could not find any NVIDIA libraries on this host!",
      "[rank0]: RuntimeError: No CUDA GPUs are available"], "version_mismatch", "nvidia-driver-not-loaded"),
    (["#0   checkHostContainerAbiCompatibility at MpiHook.cpp:228 Failed to activate MPI support. Host's MPI library "
      "libmpi.so.12.0.0 is not ABI compatible with container's MPI library libmpi.so.40.30.1."],
     "version_mismatch", "container-mpi-abi-mismatch"),
    (["slurmstepd: error: pyxis:     [ERROR] Unknown MELLANOX device id: 0"], "nccl_interface_selection",
     "container-mellanox-device-unknown"),
])
def test_hpc_containers_name_the_cause(lines, category, sid):
    """Catalogue round nineteen: what Apptainer, Enroot/pyxis, Sarus or Shifter printed when the
    container, not the script, stopped a rank."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == (category, sid)



@pytest.mark.parametrize("lines, category", [
    # the store's connection timing out over Tailscale, whose ACL drops the port
    (["[W socket.cpp:601] [c10d] The client socket has failed to connect to [100.101.102.103]:29500 (errno: 110 - "
      "Connection timed out).",
      "Drop: TCP{100.101.102.104:51234 > 100.101.102.103:29500} 60 no rules matched"], "port_in_use_or_firewall"),
    # a WireGuard tunnel that never completed its handshake
    (["wireguard: wg0: Handshake for peer 2 (203.0.113.7:51820) did not complete after 5 seconds, retrying (try 2)",
      "  transfer: 0 B received, 14.80 KiB sent"], "port_in_use_or_firewall"),
    # the worker node is offline on ZeroTier
    (["200 info 8bd5124fd6 1.14.1 OFFLINE"], "rendezvous_master_unreachable"),
    # OpenVPN's MTU does not fit, and NCCL's connection drops mid-run
    (["2024-05-02 09:31:55 TCP/UDP packet too large on write to [AF_INET]203.0.113.5:1194 (tried=1573,max=1560)",
      "NCCL WARN Net : Connection closed by remote peer"], "nccl_interface_selection"),
    (["bind [127.0.0.1]:29500: Address already in use",
      "channel_setup_fwd_listener_tcpip: cannot listen to port: 29500"], "port_in_use_or_firewall"),
])
def test_overlay_networks_name_the_cause(lines, category):
    """Catalogue round nineteen: a VPN, a tunnel or a host firewall between sites names why the
    nodes could not connect."""
    assert diagnose(lines)[0].category == category


WATCHDOG_RANK3 = ("[rank3]:[E1206 09:12:41.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, "
                  "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


@pytest.mark.parametrize("health, category, sid", [
    ("Detected 2 volatile double-bit ECC error(s) in GPU 3. Drain the GPU and reset it or reboot the node.",
     "oom_cuda_error", "gpu-health-memory-fault"),
    ("ERROR:  nhc:  Health check failed:  check_gpu_ecc: GPU id 3: Row remap pending. FaultCode: NHC2007",
     "oom_cuda_error", "gpu-health-memory-fault"),
    ("XID error: 79, XID causes: Bus Error, Driver Error, HW Error.", "oom_cuda_error", "gpu-health-gpu-fault"),
    ("Only 10 NvLinks are up out of the expected 18 Ensure Fabric Manager is running.", "oom_cuda_error",
     "gpu-health-nvlink-down"),
    ("GPU 0 was unsuccessfully written to by GPU 1 over PCIe in a peer-to-peer test: Failed when attempting to "
     "perform a small write of 8 bytes: ''.", "p2p_acs_iommu", "gpu-health-p2p-write-failed"),
    ("\tGPU 3: FAULTY", "oom_cuda_error", "gpu-burn-errors"),
    ("0000:5e:00.0(ib2) is not up, link state is 1: DOWN", "nccl_interface_selection", "ib-port-health"),
    ("ERROR:  nhc:  Health check failed:  check_ib_link_flapping: IB link flapping detected, multiple IB link "
     "flapping events within 6 hours. FaultCode: NHC2005", "nccl_interface_selection", "ib-port-health"),
])
def test_a_health_check_beside_a_timeout_names_the_hardware(health, category, sid):
    """Catalogue round twenty: the ranks only timed out; the health tool's verdict on the node,
    pasted after them, says which hardware failed."""
    top = diagnose([WATCHDOG_RANK3, health])[0]
    assert (top.category, top.id) == (category, sid)


def test_a_throttled_gpu_is_a_straggler_not_a_cause_over_a_rank_error():
    """Heat slows a GPU; it does not raise a rank's CUDA error: the error stays the answer, and
    with only the timeout the throttle is one of the lines the timeout's finding rests on."""
    hot = "Warning: GPU 3 throttled, reason=0x0000000000000040"
    assert diagnose(["[rank1]: RuntimeError: CUDA error: out of memory", hot])[0].category == "oom_cuda_error"
    top = diagnose([WATCHDOG_RANK3, hot])[0]
    assert top.category == "nccl_timeout_or_desync"
    assert "gpu-health-thermal-throttle" in [s["signature"] for s in top.evidence["supporting"]]


NO_TORCH = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 3, in <module>',
            "    import torch", "ModuleNotFoundError: No module named 'torch'"]


@pytest.mark.parametrize("lines, category, sid", [
    # the job script's module load failed on node2: its rank then has no torch
    (['node2: Lmod has detected the following error:  The following module(s) are unknown: "cuda/12.1"',
      *NO_TORCH], "launcher_misuse", "node-module-not-loaded"),
    (["/var/spool/slurmd/job123456/slurm_script: line 12: module: command not found", *NO_TORCH],
     "launcher_misuse", "node-module-not-loaded"),
    # conda's hook never ran in the batch shell: conda's own exception is not the script's error
    (["CommandNotFoundError: Your shell has not been properly configured to use 'conda activate'.", *NO_TORCH],
     "launcher_misuse", "node-conda-not-activated"),
    (["node2: bash: line 1: conda: command not found"], "launcher_misuse", "node-conda-not-activated"),
    # another CUDA module stayed loaded on one node, whose rank then hung the collective
    (["cuda/12.1(14):ERROR:150: Module 'cuda/12.1' conflicts with the currently loaded module(s) 'cuda/11.8'",
      WATCHDOG_RANK3], "version_mismatch", "node-module-conflict"),
    (["bash: /home/user/venv/bin/torchrun: /home/user/venv/bin/python3: bad interpreter: No such file or directory"],
     "launcher_misuse", "node-python-env-missing"),
    (["Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding",
      "Python runtime state: core initialized", "ModuleNotFoundError: No module named 'encodings'"],
     "launcher_misuse", "python-cannot-find-its-prefix"),
    # every rank's debugpy.listen(5678): not the rendezvous port
    (["[rank1]: RuntimeError: Can't listen for client connections: [Errno 98] Address already in use",
      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"],
     "port_in_use_or_firewall", "debugger-port-in-use"),
    (["0.00s - Could not connect to 127.0.0.1: 5678", "ConnectionRefusedError: [Errno 111] Connection refused"],
     "port_in_use_or_firewall", "debugger-cannot-connect"),
])
def test_a_node_environment_that_did_not_set_up_is_the_cause(lines, category, sid):
    """Catalogue round twenty-one: the module system, conda, a virtualenv or Python itself failed
    on a node before the rank ran; that, not the rank's missing torch, is the answer."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == (category, sid)


@pytest.mark.parametrize("lines, sid", [
    # flash-attn 2 on the one node with V100s: its kernel check has no words of its own
    (["[rank4]: Traceback (most recent call last):",
      '[rank4]:   File "/opt/conda/lib/python3.10/site-packages/flash_attn/flash_attn_interface.py", line 51, '
      "in _flash_attn_forward",
      "[rank4]:     out, q, k, v, out_padded, softmax_lse, S_dmask, rng_state = flash_attn_cuda.fwd(",
      "[rank4]: RuntimeError: Expected is_sm90 || is_sm8x || is_sm75 to be true, but got false.  (Could this "
      "error message be improved?  If so, please report an enhancement request to PyTorch.)"],
     "extension-gpu-arch-unsupported"),
    (["NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:",
      "`fa2F@2.5.7-pt` is not supported because:",
      "    requires device with capability >= (8, 0) but your GPU has capability (7, 0) (too old)"],
     "extension-gpu-arch-unsupported"),
    (["AssertionError: Device compute capability 10.0 or higher required for MXFP8 execution."],
     "extension-gpu-arch-unsupported"),
    # torch.compile on a Blackwell node with an older Triton: ptxas's own line, then the wrapper
    (["ptxas fatal   : Value 'sm_120a' is not defined for option 'gpu-name'",
      "torch._inductor.exc.InductorError: PTXASError: PTXAS error: Internal Triton PTX codegen error"],
     "triton-ptxas-too-old"),
    (["ERROR: Package 'torch' requires a different Python: 3.8.10 not in '>=3.9.0'"],
     "pip-cannot-install-torch-stack"),
    (["  torchvision 0.17.0 depends on torch==2.2.0", "ERROR: ResolutionImpossible: for help visit "
      "https://pip.pypa.io/en/latest/topics/dependency-resolution/#dealing-with-dependency-conflicts"],
     "pip-cannot-install-torch-stack"),
])
def test_an_extension_or_toolchain_that_does_not_fit_the_node_is_a_version_mismatch(lines, sid):
    """Catalogue round twenty-two: a kernel library, Triton's ptxas or pip refusing the node's
    GPU, toolkit or Python is a version mismatch, not the script's error."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == ("version_mismatch", sid)


def test_a_failed_ptxas_is_not_the_scripts_error():
    """An exception raised by Triton's ptxas under torch.compile is the node's compiler failing:
    the answer is the version mismatch it usually means, never 'fix your script'."""
    top = diagnose(["Traceback (most recent call last):",
                    '  File "/home/u/train.py", line 40, in <module>', "    loss = model(x).sum()",
                    "RuntimeError: `ptxas` failed with error code 1:"])[0]
    assert (top.category, top.id) == ("version_mismatch", "triton-ptxas-failed")


WATCHDOG_RANK1 = ("[rank1]:[E1206 09:12:41.1 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, NumelOut=1, "
                  "Timeout(ms)=600000) ran for 600012 milliseconds before timing out.")


@pytest.mark.parametrize("lines, category, sid", [
    # rank 0 stuck starting W&B: the others' watchdog is its consequence, in either order
    (["[rank0]: wandb.errors.errors.CommError: Run initialization has timed out after 90.0 sec. Please try "
      "increasing the timeout with the `init_timeout` setting: `wandb.init(settings=wandb.Settings("
      "init_timeout=120))`.", WATCHDOG_RANK1], "nccl_timeout_or_desync", "rank-waits-on-remote-service"),
    ([WATCHDOG_RANK1, "[rank4]: filelock._error.Timeout: The file lock '/shared/hf/datasets/_shared_hf_"
      "datasets_json.lock' could not be acquired."], "nccl_timeout_or_desync", "rank-waits-on-remote-service"),
    # a compute node without outbound access
    (["[rank3]: OSError: We couldn't connect to 'https://huggingface.co' to load model-00003-of-00004."
      "safetensors. You should try again after checking your internet connection.", WATCHDOG_RANK1],
     "port_in_use_or_firewall", "remote-service-unreachable"),
    (["[rank2]: requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max "
      "retries exceeded with url: /meta-llama/Llama-3.1-8B/resolve/main/config.json (Caused by "
      "NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new "
      "connection: [Errno 101] Network is unreachable'))"], "port_in_use_or_firewall", "remote-service-unreachable"),
    # MosaicML streaming: a crashed run's shared memory, ranks that disagree, local rank 0 late
    (["Traceback (most recent call last):",
      '  File "/opt/conda/lib/python3.10/site-packages/streaming/base/dataset.py", line 512, in __init__',
      "    self._locals_shm = SharedMemory(name, True, len(data))",
      "FileExistsError: [Errno 17] File exists: '/000000_locals'"],
     "shared_memory_docker", "streaming-stale-shared-memory"),
    (["[rank5]: RuntimeError: Internal error: shared memory prefix=0 was not registered by local leader. This "
      "may be because you specified different ``local`` parameters from different ranks."],
     "ddp_usage_error", "streaming-local-leader-mismatch"),
    (["[rank1]: RuntimeError: Index file s3://bucket/c4/train/index.json -> /tmp/mds/train/index.json took too "
      "long to download or failed to download. Either increase the `download_timeout` value or check the local "
      "rank 0 traceback.60.000 < 60.012 secs."], "nccl_timeout_or_desync", "streaming-local-rank-zero-late"),
    (['[rank6]: RuntimeError: Critical error in pipeline: [/opt/dali/dali/pipeline/operators/reader/loader/'
      'loader.h:57] Assert on "num_shards_ > shard_id_" failed: num_shards needs to be greater than shard_id'],
     "ddp_usage_error", "data-loader-sharding-misuse"),
])
def test_a_rank_held_up_by_its_data_or_a_service_is_named(lines, category, sid):
    """Catalogue round twenty-three: what one rank was doing instead of the collective (a
    tracker starting, a lock, a download, its data loader) is the answer, not the watchdog."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == (category, sid)


@pytest.mark.parametrize("lines", [
    # pods: the search domains' NXDOMAIN answers, a sidecar waiting to be ready, a recovered balancer
    ['[INFO] 10.244.2.17:43110 - 5712 "AAAA IN pytorchjob-master-0.default.svc.cluster.local.default.svc.'
     'cluster.local. udp 99 false 512" NXDOMAIN qr,aa,rd 192 0.000097s',
     "2024-06-11T09:12:40.117Z\tinfo\tWaiting for Envoy proxy to be ready (timeout: 60 seconds)...",
     "[    38.502117s]  INFO ThreadId(01) outbound:proxy{addr=10.96.44.12:29500}: linkerd_stack::failfast: "
     "Service has recovered",
     "2024-06-11 09:10:02.119 [INFO][61] felix/int_dataplane.go 1084: Determined pod MTU mtu=8950"],
    # HPC containers
    ["INFO:    Converting SIF file to temporary sandbox...",
     "pyxis: imported docker image: nvcr.io#nvidia/pytorch:24.05-py3",
     "WARNING: Container hostname cannot be set.",
     "INFO:    Setting --writable-tmpfs (required by nvidia-container-cli)"],
    # overlay networks between sites
    ["100.101.102.103  gpu-node-2           alice@       linux   active; direct 203.0.113.7:41641, "
     "tx 48213004 rx 51877320",
     "200 info 8bd5124fd6 1.14.1 ONLINE",
     "  latest handshake: 1 minute, 12 seconds ago",
     "[#] ip link set mtu 1420 up dev wg0",
     "2024-05-02 09:14:09 Initialization Sequence Completed",
     "Warning: ALREADY_ENABLED: '29500:tcp' already in 'public'"],
    # health tools on a healthy node
    ["| GPU Memory                | Pass - All                                     |",
     "SUCCESS:  nhc:  Health check passed:  check_gpu_count: Expected 8 and found 8", "\tGPU 0: OK",
     "No XID error was found.", "## Summary: 36 nodes checked, 0 bad nodes found",
     "SymbolErrorCounter:..............0", "            DRAM Correctable              : 177",
     "         Link 0: Replay Errors: 0",
     "has pending row remaps: pending/failure/correctable/uncorrectable: 0/0/3/0."],
    # a node's environment being set up: modules swapped, pip as root, a debugger's hints
    ['Lmod is automatically replacing "cuda/11.8" with "cuda/12.1".',
     "The following have been reloaded with a version change:", "  Unloading conflict: cuda/11.8",
     "Defaulting to user installation because normal site-packages is not writeable",
     "WARNING: Running pip as the 'root' user can result in broken permissions and conflicting behaviour with "
     "the system package manager. It is recommended to use a virtual environment instead: "
     "https://pip.pypa.io/warnings/venv",
     "0.00s - Debugger warning: It seems that frozen modules are being used, which may",
     "Type 'up' to get to the frame that called dist.breakpoint(rank=0)"],
    # extensions loading and building: pip's notices, the JIT build's progress, fallbacks that work
    ["Requirement already satisfied: torch in /usr/local/lib/python3.10/dist-packages (2.1.0+cu121)",
     "Successfully installed torch-2.1.0+cu121 triton-2.1.0",
     "Using /root/.cache/torch_extensions/py310_cu121 as PyTorch extensions root...",
     "Emitting ninja build file /root/.cache/torch_extensions/py310_cu121/fused_adam/build.ninja...",
     "Loading extension module fused_adam...",
     "No prebuilt binary for CUDA 13.2, loading CUDA 13.0 instead. Set BNB_CUDA_VERSION to override.",
     "Warning:  apex was installed without --cpp_ext.  Falling back to Python flatten and unflatten.",
     "[WARNING  | transformer_engine.pytorch.attention.dot_product_attention.utils]: Supported flash-attn "
     "versions are >= 2.1.1, <= 2.8.1. Found flash-attn 2.8.3."],
    # services and data loaders at work: banners, downloads, cache hits, locks taken, defaults
    ["wandb: Syncing run fluent-sun-12", "Fetching 4 files: 100%|██████████| 4/4 [00:00<00:00, 2891.96it/s]",
     "wandb: Network error resolved after 0:01:12.480213, resuming normal operation.",
     "DEBUG:filelock:Lock 140234567890 acquired on /root/.cache/huggingface/hub/.locks/models--x/5ae2.lock",
     "Found cached dataset json (/root/.cache/huggingface/datasets/json/default-2c5b1a9e8f7d6c3b/0.0.0/f4e8)",
     "Files already downloaded and verified",
     "Because `predownload` was not specified, it will default to 8*batch_size if batch_size is not None, "
     "otherwise 64.",
     "Too many dataloader workers: 8 (max is dataset.num_shards=2). Stopping 6 dataloader workers."],
    # deprecations announced by the frameworks (round 24), NCCL not finding optional plugins
    ["/opt/conda/lib/python3.8/site-packages/pytorch_lightning/trainer/connectors/accelerator_connector.py:447: "
     "LightningDeprecationWarning: Setting `Trainer(gpus=4)` is deprecated in v1.7 and will be removed in v2.0. "
     "Please use `Trainer(accelerator='gpu', devices=4)` instead.",
     "/usr/local/lib/python3.10/dist-packages/accelerate/accelerator.py:446: FutureWarning: Passing the "
     "following arguments to `Accelerator` is deprecated and will be removed in version 1.0 of Accelerate: "
     "dict_keys(['dispatch_batches', 'split_batches']).",
     "node1:2345:2345 [0] NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v8 symbol.",
     # a warning that names a release it needs, and falls back: the run goes on
     "UserWarning: Flash attention requires PyTorch 2.0 or higher; falling back to the math kernel",
     "Warning: the old loader is deprecated and no longer supported, use the new one"],
], ids=["pod-networking", "hpc-containers", "overlay-networks", "gpu-health", "node-environment",
        "extensions", "services-and-loaders", "api-deprecations"])
def test_routine_lines_of_rounds_eighteen_to_twenty_four_are_no_finding(lines):
    assert diagnose(lines) == []


@pytest.mark.parametrize("lines, sid", [
    # Lightning < 1.5 given a script written for 1.5+ (Python 3.7 names only __init__)
    (["Traceback (most recent call last):", '  File "main.py", line 55, in main',
      "    limit_train_batches=50 if hparams.test_run else 1.0",
      '  File "/root/miniconda3/lib/python3.7/site-packages/pytorch_lightning/trainer/connectors/'
      'env_vars_connector.py", line 40, in insert_env_defaults', "    return fn(self, **kwargs)",
      "TypeError: __init__() got an unexpected keyword argument 'strategy'"],
     "trainer-option-removed-or-added"),
    (["ValueError: You selected an invalid accelerator name: `accelerator='ddp'`. Available names are: cpu, "
      "cuda, hpu, ipu, mps, tpu."], "trainer-strategy-name-renamed"),
    (["NotImplementedError: The `pl.plugins.DDPPlugin` class was deprecated in v1.6 and is no longer supported "
      "as of v1.8. Use `pl.strategies.DDPStrategy` instead."], "framework-api-removed-in-release"),
    (['  File "/work/train.py", line 3, in <module>', "    from lightning.pytorch.plugins import DDPPlugin",
      "ImportError: cannot import name 'DDPPlugin' from 'pytorch_lightning.plugins' "
      "(/usr/local/lib/python3.10/site-packages/pytorch_lightning/plugins/__init__.py)"],
     "framework-name-missing-in-release"),
    (["ValueError: 'XLA' is not a valid DistributedType"], "accelerate-config-from-another-release"),
    (["RuntimeError: Torch version must be 2.5 or higher to use symmetric memory. Current version: 2.4.1+cu124"],
     "library-needs-another-release"),
    (["AssertionError: --model-parallel-size is no longer valid, use --tensor-model-parallel-size instead"],
     "framework-api-removed-in-release"),
])
def test_code_written_for_another_release_of_a_framework_is_a_version_mismatch(lines, sid):
    """Catalogue round twenty-four: a framework's constructor, strategy name, hook or module that
    the installed release renamed or removed is a version mismatch, not the script's own error."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == ("version_mismatch", sid)


@pytest.mark.parametrize("lines, category, sid", [
    (["node1:2345:2345 [0] misc/argcheck.cc:43 NCCL WARN AllReduce : invalid type 9",
      "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid "
      "argument, NCCL version 2.8.4"], "version_mismatch", "nccl-library-older-than-headers"),
    (["node1:2345:2345 [0] misc/argcheck.cc:39 NCCL WARN Broadcast : invalid root 8 (root should be in the "
      "0..3 range)"], "ddp_usage_error", "nccl-root-outside-group"),
    (["node1:2345:2345 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Invalid argument"],
     "shared_memory_docker", "nccl-shm-segment-refused"),
    (["[1,0]<stderr>:RuntimeError: Internal error. Requested ReadyEvent with GPU device but not compiled with "
      "CUDA."], "horovod_specific", "horovod-built-without-gpu-ops"),
    # NCCL 2.4.2's shm transport: the CUDA call's own line, the excerpt ends before NCCL names it
    (["heinzel135:151780:151928 [2] include/shm.h:42 NCCL WARN Cuda failure 'invalid argument'",
      "heinzel135:151780:151928 [2] NCCL INFO transport/shm.cu:187 -> 1",
      "heinzel135:151780:151928 [2] NCCL INFO init.cu:658 -> 1"],
     "version_mismatch", "nccl-unhandled-cuda-error-release"),
])
def test_the_communication_stacks_releases_and_checks(lines, category, sid):
    """Catalogue round twenty-four: NCCL refusing what its release does not know, its checks of
    roots and communicators, its shared memory, Horovod built without its GPU operations."""
    top = diagnose(lines)[0]
    assert (top.category, top.id) == (category, sid)


def test_a_cli_that_takes_the_launchers_local_rank_for_its_command_is_the_launch():
    """DeepSpeed's launcher puts --local_rank=N first; a CLI with sub-commands (LLaMA-Factory's)
    reads it as the command: the launch, not the script's error."""
    top = diagnose(["Traceback (most recent call last):",
                    '  File "/home/u/envs/t/lib/python3.10/site-packages/llmtuner/cli.py", line 75, in main',
                    '    raise NotImplementedError("Unknown command: {}".format(command))',
                    "NotImplementedError: Unknown command: --local_rank=0"])[0]
    assert (top.category, top.id) == ("launcher_misuse", "fire-could-not-consume-local-rank")


def test_a_hang_of_unbatched_point_to_point_sends_is_a_desync_first():
    """torch's notice that an unbatched send/recv creates a 2-rank communicator: in a run that
    hung, ranks pairing their sends and receives in another order come before P2P."""
    lines = ["$ torchrun --standalone --nproc_per_node=3 pipeline_1f1b.py",
             "An unbatched P2P op (send/recv) was called on this ProcessGroup with size 3.",
             "In lazy initialization mode, this will result in a new 2-rank NCCL communicator",
             "to be created."]
    found = diagnose_report(lines, hung=True).findings
    assert found[0].category == "nccl_timeout_or_desync"
    assert "hang-unbatched-p2p" in [s["signature"] for s in found[0].evidence["supporting"]]
    assert diagnose(lines) == []  # a run that goes on prints it too


def test_srun_binding_cpus_outside_the_step_is_the_launch():
    """A --cpu-bind mask template for whole nodes on a shared allocation: Slurm aborts the step."""
    top = diagnose(["srun: error: CPU binding outside of job step allocation, allocated CPUs are:",
                    "  0x001E1E1E1E1E1E1E001E1E1E1E1E1E1E"])[0]
    assert (top.category, top.id) == ("launcher_misuse", "slurm-cpu-binding-outside-allocation")


def test_cudnn_loading_its_parts_from_two_installs_is_a_version_mismatch():
    """cuDNN 9's sub-libraries from a pip wheel beside an NGC image's libcudnn (LD_LIBRARY_PATH):
    its own status says so, and it is not the script's error."""
    top = diagnose(["RuntimeError: CUDNN_BACKEND_TENSOR_DESCRIPTOR cudnnFinalize failed",
                    "ptrDesc->finalize() cudnn_status: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"])[0]
    assert (top.category, top.id) == ("version_mismatch", "cudnn-runtime-older-than-torch-build")


def test_a_device_past_the_visible_gpus_in_torchs_lazy_init_is_the_device():
    """Ray rewrote the visible devices and set_device(local_rank) reached past them: torch's lazy
    CUDA init fails on that device's generator, a wrong device, not the script's IndexError."""
    top = diagnose(['  File "venv/lib/python3.11/site-packages/torch/cuda/random.py", line 126, in cb',
                    "    default_generator = torch.cuda.default_generators[i]",
                    "IndexError: tuple index out of range",
                    '  File "OpenRLHF/openrlhf/utils/deepspeed.py", line 87, in setup_distributed',
                    "    torch.cuda.set_device(self.args.local_rank)",
                    "torch.cuda.DeferredCudaCallError: CUDA call failed lazily at initialization with error: "
                    "tuple index out of range"])[0]
    assert (top.category, top.id) == ("duplicate_gpu_or_wrong_device", "cuda-invalid-device-ordinal")


def test_a_librarys_elastic_agent_behind_torchs_signature_is_a_version_mismatch():
    top = diagnose(["rogpt1:   File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/agent/"
                    "server/api.py\", line 556, in _rendezvous", "rogpt1:     self._set_master_addr_port(",
                    "rogpt1: TypeError: DSElasticAgent._set_master_addr_port() takes 3 positional arguments "
                    "but 4 were given"])[0]
    assert (top.category, top.id) == ("version_mismatch", "framework-api-removed-in-release")


@pytest.mark.parametrize("lines", [
    # the script's own classes rejecting a keyword: its error, not a framework's release
    ["TypeError: Trainer.__init__() got an unexpected keyword argument 'lr'"],
    ["TypeError: GradAccelerator.__init__() got an unexpected keyword argument 'steps'"],
    ["TypeError: Pooler.__init__() got an unexpected keyword argument 'strategy'"],
])
def test_a_users_own_class_rejecting_a_keyword_names_no_release(lines):
    assert [f.category for f in diagnose(lines)] in ([], ["unknown"], ["script_error"])


@pytest.mark.parametrize("lines", [
    # a warning that quotes a caught exception naming a release, then falls back; a run goes on
    ["[WARNING] [utils.py:55:try_import_te] Transformer Engine not used (ImportError: Transformer Engine "
     "requires PyTorch 2.1 or higher); falling back to local layers", "epoch 2 loss 0.31"],
    ["WARNING:root:Could not enable fused optimizer: RuntimeError: apex version must be 0.1.2 or higher, "
     "using torch.optim.AdamW", "epoch 2 loss 0.31"],
    ["Unknown option: --local_rank=0, ignoring", "epoch 2 loss 0.31"],
])
def test_a_warning_that_falls_back_is_no_cause(lines):
    assert diagnose(lines) == []
