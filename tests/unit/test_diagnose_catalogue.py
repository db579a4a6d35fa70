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
    # TensorPipe's socket errors alone: a peer that died, a firewall and a wrong address read the same
    "[W tensorpipe_agent.cpp:726] RPC agent for worker_3 encountered error when reading incoming request "
    "from server_0: EOF: end of file (this error originated at tensorpipe/transport/uv/connection_impl.cc:132)",
    "[W tensorpipe_agent.cpp:940] RPC agent for trainer0 encountered error when reading incoming response "
    "from ps0: ECONNREFUSED: connection refused (this error originated at "
    "tensorpipe/transport/uv/connection_impl.cc:62)",
    "[W tensorpipe_agent.cpp:916] RPC agent for trainer1 encountered error when sending outgoing request #0 "
    "to ps0: ETIMEDOUT: connection timed out (this error originated at "
    "tensorpipe/transport/uv/connection_impl.cc:62)",
    # RPC's own membership rule, UCC's one-device rule: one wording each, no family yet
    "RuntimeError: RPC group mixes statically and dynamically initialized members which is not supported.",
    "[E1205 08:41:02.123456789 ProcessGroupUCC.cpp:384] [Rank 1][ProcessGroupUCC-1][INIT][ERROR] ucc "
    "communicator was initialized with different cuda device,multi device is not supported",
    # Composer's launcher: a rank's exit and its teardown; the cause is on that rank's own lines
    "ERROR:composer.cli.launcher:Rank 3 crashed with exit code 1.",
    "WARNING:composer.cli.launcher:Failed to kill global rank 5 (PID 41237) with SIGTERM; terminating with "
    "SIGKILL instead",
    # Ignite's and Lightning Fabric's argument checks, FairScale's state machine, hivemind's Go daemon,
    # fastai's optional dependency: one wording each, no family yet
    "ValueError: Argument kwargs should not contain 'device_ids', but got {'device_ids': [0]}",
    "RuntimeError: For multi-node configuration, please set 'hosts' argument instead according to horovod.run API.",
    "RuntimeError: Can not re-initialize Horovod if it is already initialized",
    "ValueError: expected to be in states [<TrainingState.IDLE: 1>] but current state is "
    "TrainingState.BACKWARD_PRE",
    "hivemind.p2p.p2p_daemon_bindings.utils.P2PDaemonError: p2pd binary format incompatible with your platform "
    "(Linux/aarch64). The binary may be corrupted or for the wrong architecture. Reinstall with: "
    "HIVEMIND_BUILDGO=1 pip install -e .",
    "ImportError: Accelerate is required. Install with `pip install accelerate`",
    "TypeError: `Fabric.launch(function=<function train at 0x7f3c2a1b9d30>)` needs to take at least one "
    "argument. The launcher will pass in the `Fabric` object so you can use it inside the function.",
    # Ascend and Gaudi: a bare error code or a failed call without its reason (answered `unknown`
    # with the lines, not as the script's own error)
    "RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:217 NPU function error: "
    "c10_npu::SetDevice(device_id_), error code is 507033",
    "RuntimeError: store->get() got error: HCCL_BLOCKING_WAIT",
    "RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:130 HCCL function error: "
    "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 7",
    "[ERROR] 2025-06-12-10:15:30 (PID:23811, Device:3, RankID:3) ERR02200 DIST call hccl api failed.",
    "RuntimeError: Comm Init Rank Error",
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
