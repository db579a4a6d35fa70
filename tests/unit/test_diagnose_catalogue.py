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
    # dlrover's and InternEvo's checks of the nodes: a verdict without the failing part's reason
    "[2026-03-11 10:22:41,117] [ERROR] [training.py:2437:run_network_check] Network of the cluster is not "
    "available because of abnormal node.",
    "2024-03-20 10:59:12,004\tWARNING gputest.py:220 in bench_net -- Rank 13 NCCL test is slower than avg, "
    "Hostname SH-IDC1-10-140-0-133, allreduce_time 52.31, avg 11.04, CPU temp 64.0, GPU temp 58",
    "2024-03-20 10:59:08,771\tWARNING gputest.py:272 in bench_gpu -- Rank 13 GPU is slower than avg, "
    "Hostname SH-IDC1-10-140-0-133, tflops 98.41, avg 171.27, CPU temp 64.0, GPU temp 86",
    "[2026-03-11 10:23:55,612] [WARNING] [rdzv_manager.py:828:check_fault_node] Fault nodes(rank:node_id) are: "
    "{3: 3}",
    # ATorch's no-GPU notice (a CPU-only torch or hidden GPUs read alike), its Flash Checkpoint's skipped
    # save, DeepSpeed-Chat's and xtuner's own configuration rules: one wording each, no family yet
    "[2024-06-05 09:12:44,018] [ERROR] [distributed.py:713:init_distributed] torch.cuda.is_available() returns "
    "False. Cannot find any GPUs. If using nccl as the communication backend, a GPU must exists. Using gloo to "
    "communicate in cpu context.",
    "[2026-03-11 11:40:02,913] [WARNING] [ckpt_saver.py:971:save_step_checkpoint] Skip persisting the "
    "checkpoint of step 2000 because the cached step in memory are not consistent.",
    "AssertionError: Zero stage 3 must be used to do Tensor sharding in the hybrid engine",
    "AssertionError: Sequence parallel training without DeepSpeed lacks validation.Please use DeepSpeed to "
    "optimize the training phase by `--deepspeed deepspeed_zero1 (deepspeed_zero2 or deepspeed_zero3)`.",
    # job systems: a rank or a job that exited (its cause is on its own lines), the schedulers' and
    # torchx's own argument and placement rules, HTCondor's sshd, PBS's MOM: one wording each, no family yet
    "ValueError: Non-positive replicas for role: trainer. Did you forget to set role.num_replicas?",
    "ValueError: exactly one of --script and -m must be specified",
    "ValueError: Job `trainer-x7k2p9` already exists. This seems like a transient exception, try "
    "resubmitting job",
    "flux-job: task(s) exited with exit code 1",
    "CONDOR_SSHD and/or CONDOR_SSH_KEYGEN are not configured, exiting",
    "Warning  FailedJobs  jobset/llama-ft  jobset failed due to one or more job failures (first "
    "failed job: llama-ft-node-0)",
    "Warning  ReachedMaxRestarts  jobset/llama-ft  jobset failed due to reaching max number of "
    "restarts (first failed job: llama-ft-node-2)",
    "Warning  ExclusivePlacementViolation  pod/llama-ft-node-1-3-x8k2q  Pod violated JobSet "
    "exclusive placement policy",
    "ray.train.v2._internal.exceptions.WorkerHealthCheckTimeoutError: A worker health check has "
    "been hanging for 612.48 seconds. Marking the worker as dead.",
    "AssertionError: must be run on-cluster",
    "error: empty script is not allowed",
    "30.412s: job.exception fZ3kWq7Fm type=exec severity=0 python3: task rank 5 on host node02 "
    "exited (Exit 1) and exit-timeout=30s has expired",
    "30.398s: job.exception fZ3kWq7Fm type=exec severity=0 python3: task rank 5 on host node02 "
    "exited and exit-timeout=30s has expired",
    "E1203 10:15:32.412345       1 pytorch.go:71] job llama-ft doesn't have task master",
    "pbs_tmrsh: tm_init: system error - MOM cannot be contacted (17000)",
    # a job stopped at its time limit: a run that hung and one that trained until its time read alike
    "=>> PBS: job killed: walltime 7230 exceeded limit 7200",
    "Failed  True  DeadlineExceeded  TrainJob exceeded its active deadline",
    # kernel libraries: TransformerEngine's Userbuffers (its NVLink-domain limit, its device reset, its socket
    # exchange), its expert-parallel group, torchao's float8 with FSDP2 and TP, apex's process groups and
    # pipeline rules: each library's own configuration rules in one wording each, no family yet
    "RuntimeError: /opt/transformerengine/transformer_engine/common/comm_gemm_overlap/userbuffers/"
    "userbuffers-host.cpp:664 in function register_user_buffer_collective: Assertion failed: comm->nvsize <= 8. "
    "CUDA IPC supports only up to 8 GPUs in an NVLink domain.",
    "3: device used 0[8] ,resetting device to 3",
    "AssertionError: enable_fsdp_float8_all_gather only supports tensorwise scaling granularity, got "
    "ScalingGranularity.AXISWISE",
    "ValueError: Expecting module to be Float8Linear but found <class 'torch.nn.modules.linear.Linear'>",
    "RuntimeError: Invalid process group configuration (process group size = 16, distributed process group "
    "size = 8, redundant process group size = 4)",
    "RuntimeError: /opt/transformerengine/transformer_engine/common/ep/ep_backend.cpp:170 in function "
    "initialize: Assertion failed: comm_size == config.ep_size. ep_comm size (16) must equal ep_size (8). Pass "
    "the EP sub-communicator, not the world comm.",
    "Failed, UDS error /opt/transformerengine/transformer_engine/common/comm_gemm_overlap/userbuffers/"
    "userbuffers-host.cpp:590 'System error'",
    "AssertionError: initialize_ub() must be called before layer construction.",
    "AssertionError: amax reduction group is already initialized",
    "AssertionError: pipeline-model-parallel size should be greater than 2 with interleaved schedule",
    "UDS: Binding to socket /tmp/ub-ipc-socket-0-9f1c2a7b40d15e62 failed : Address already in use (98)",
    # CoreDNS serving before it synced with the API server: a warning many healthy clusters print
    "[WARNING] plugin/kubernetes: starting server with unsynced Kubernetes API",
    # pyxis's header before it replays Enroot's log, and its hint on every failed start: the
    # reason is on the lines around them (container-start-failed reads those)
    "slurmstepd: error: pyxis: printing enroot log file:",
    "slurmstepd: error: pyxis: if the image has an unusual entrypoint, try using --no-container-entrypoint",
    # NHC's single-node NCCL bandwidth check: ACS, an NVLink down or a throttled GPU read the same
    "ERROR:  nhc:  Health check failed:  check_nccl_allreduce: NCCL allreduce, BUS BW (expected >=228 GB/s, but "
    "measured 38.2 GB/s). FaultCode: NHC2010",
    # `mlxlink`'s and `nvidia-smi -q`'s rows with no section around them: `State : Polling`, `Pending : Yes`
    # and `Link 2: <inactive>` are also rows of other sections and other tools that mean nothing wrong
    "State                              : Polling",
    "Pending                           : Yes",
    "Link 2: <inactive>",
    # xformers' dispatcher reasons that are the script's choice (a dtype, deterministic mode),
    # printed bare inside its NotImplementedError; and DeepSpeed's JIT build in a forked child
    # that already touched CUDA: the script's, but its words (CUDA) are a GPU's
    "dtype=torch.float32 (supported: {torch.float16, torch.bfloat16})",
    "operator is non-deterministic, but `torch.use_deterministic_algorithms` is set",
    "RuntimeError: DeepSpeed JIT builder for 'fused_adam' cannot probe CUDA device capabilities in a forked "
    "subprocess where CUDA has already been initialized. Set TORCH_CUDA_ARCH_LIST to specify target "
    "architectures explicitly.",
    # pip's resolver report: the lines after it say which pins conflict
    "The conflict is caused by:",
    # huggingface_hub's offline mode and wandb's call order: the script's errors, but in class
    # names (`OfflineModeIsEnabled`, a bare `Error`) the exception reader does not take for one,
    # or in words (`ConnectionError`) it takes for the network; hf_transfer's failure reads as
    # the script's
    "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/api/models/meta-llama/"
    "Llama-3.1-8B/revision/main: offline mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` "
    "environment variable.",
    "huggingface_hub.utils._errors.OfflineModeIsEnabled: Offline mode is enabled. Tried to reach "
    "https://huggingface.co/bert-base-uncased/resolve/main/config.json",
    "huggingface_hub.errors.OfflineModeIsEnabled: Offline mode is enabled. Tried to reach "
    "https://huggingface.co/datasets/allenai/c4/resolve/main/en/c4-validation.00000-of-00008.json.gz",
    "ConnectionError: Couldn't reach the Hugging Face Hub for dataset 'HuggingFaceFW/fineweb-edu': Offline mode "
    "is enabled.",
    "wandb.errors.errors.Error: You must call wandb.init() before wandb.log()",
    "RuntimeError: An error occurred while downloading using `hf_transfer`. Consider disabling "
    "HF_HUB_ENABLE_HF_TRANSFER for better error handling.",
    # one attempt that failed and is retried: healthy runs print these when the network hiccups,
    # so alone they are no finding (the failure is the line that gives up)
    "Rate limited. Waiting 61.0s before retry [Retry 2/5].",
    "Retrying in 8s [Retry 5/5].",
    "HTTP Error 429 thrown while requesting HEAD https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/"
    "config.json",
    "'(ReadTimeoutError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Read timed out. (read "
    "timeout=10)\"), '(Request ID: 5f2c1a4e-8b7d-4e0f-9a61-2d3c4b5a6e7f)')' thrown while requesting HEAD "
    "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json",
    "Error while downloading from https://cdn-lfs-us-1.hf.co/repos/3a/5b/3a5b.../model-00001-of-00004.safetensors: "
    "HTTPSConnectionPool(host='cdn-lfs-us-1.hf.co', port=443): Read timed out.",
    "Got disconnected from remote data host. Retrying in 5sec [3/20]",
    "DEBUG:filelock:Lock 140234567890 not acquired on /root/.cache/huggingface/hub/.locks/models--meta-llama--"
    "Llama-3.1-8B/5ae2ffd1b0bb2a2bb3b4e8b3e3c9e7a1f0d2c4b6.lock, waiting 0.05 seconds ...",
    "wandb: Network error (ConnectionError), entering retry loop.",
    "wandb: 429 encountered (Filestream rate limit exceeded, retrying in 2.4 seconds.), retrying request",
    # wandb's line when the program exits abnormally, whatever the reason: an echo
    "wandb: ERROR Abnormal program exit",
    # MosaicML streaming's warnings that a small dataset will repeat samples: the script's
    # choice, and a run that goes on
    "UserWarning: Attempting to partition 3 samples per physical node over 8 gpus. This will result in many "
    "samples being repeated, and depending on your batching method, batches being completely dropped. Check if "
    "your dataset has the expected number of samples.",
    "UserWarning: Trying to partition 40 samples over 64 canonical nodes. This will result in many samples being "
    "repeated, and depending on your batching method, batches being completely dropped. Check if your dataset has "
    "the expected number of samples, and consider decreasing the number of canonical nodes.",
    # round 24: DeepSpeed falling back from an all-gather torch lacks: a warning, the run goes on
    "[2025-03-04 10:14:02,331] [WARNING] [torch.py:242:all_gather_base] unable to find "
    "torch.distributed._all_gather_base. will fall back to torch.distributed.reduce_scatter which will "
    "result in suboptimal performance. please consider upgrading your pytorch installation.",
    # NCCL's "invalid argument" through torch, alone: read as a buffer on the wrong device first (the
    # usual cause in the trackers), where the catalogue names DDP usage and a release second
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1191, invalid argument, "
    "NCCL version 2.14.3",
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
    "invalid argument (run with NCCL_DEBUG=WARN for details), NCCL version 2.19.3",
    "ncclInvalidArgument: Invalid value for an argument.",
    # horovodrun --check-build's unticked NCCL: a finding only inside the check's own output
    "[ ] NCCL",
    # Lightning refusing a model that is no LightningModule: a plain nn.Module gives it too, so
    # alone it names no release
    "TypeError: `model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `LitModel`",
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
