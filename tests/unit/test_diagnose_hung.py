"""A run that hung prints no error: diagnose ranks the causes of a hang by the run's shape (one
node whose GPUs copy peer to peer, several nodes, one GPU), as the diagnosis with --hung or a
run record that ended "hung", and as "if the run hung" otherwise (never a finding then: a
healthy excerpt looks the same)."""

from __future__ import annotations

import json

import pytest

from ddpkit.troubleshoot.diagnose.kb import KnowledgeBaseError, parse_hang_causes
from ddpkit.troubleshoot.diagnose.matcher import diagnose_report
from ddpkit.troubleshoot.diagnose.rundir import diagnose_dir
from tests.conftest import ddpkit

# nccl-tests on two GPUs of one box, stopped after NCCL's start-up (the shape of NVIDIA/nccl#1320)
ONE_NODE = """\
$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 2
# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid    149 on     box207 device  0 [0x56] NVIDIA RTX A6000
#  Rank  1 Group  0 Pid    149 on     box207 device  1 [0x57] NVIDIA RTX A6000
box207:149:149 [0] NCCL INFO Bootstrap : Using eno1:10.0.0.7<0>
NCCL version 2.21.5+cuda12.4
box207:149:157 [0] NCCL INFO Channel 00/02 :    0   1
box207:149:157 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
box207:149:158 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
box207:149:157 [0] NCCL INFO Connected all rings
"""
# Horovod over Open MPI on three hosts, no output at all (the shape of horovod#106)
THREE_HOSTS = """\
mpirun -np 3 \\
    -H ml-208,ml-209,ml-210 \\
    -bind-to none -map-by slot \\
    python tensorflow_word2vec.py
"""
ONE_GPU = """\
$ ./build/all_reduce_perf -b 8 -e 128M -f 2 -g 1
# nThread 1 nGpus 1 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20
#
# Using devices
#  Rank  0 Group  0 Pid  69438 on box device  0 [0x01] NVIDIA RTX A6000
box:69438:69438 [0] NCCL INFO Bootstrap : Using enp3s0f0:10.50.56.33<0>
box:69438:69444 [0] NCCL INFO NET/Socket : Using [0]enp3s0f0:10.50.56.33<0> [1]br-50a6a39f12ff:172.18.0.1<0>
"""
WATCHDOG = ("[rank0]:[E1130 12:40:00.1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")


def cats(findings) -> list[str]:
    return [f.category for f in findings]


def test_a_log_without_error_has_no_finding_but_ranks_what_a_hang_would_be():
    report = diagnose_report(ONE_NODE.splitlines())
    assert report.findings == [] and report.category == "none" and not report.failed
    top = report.if_hung[0]
    assert top.category == "p2p_acs_iommu" and top.kind == "hang"
    # the lines behind it: the two-GPU command and the PCIe workstation GPUs
    texts = [s["text"] for s in top.evidence["supporting"]]
    assert any("-g 2" in t for t in texts) and any("RTX A6000" in t for t in texts), texts
    out = report.to_dict()
    assert out["category"] == "none" and out["findings"] == [] and out["hung"] is False
    assert out["if_hung"][0]["category"] == "p2p_acs_iommu"


def test_a_run_that_printed_its_end_gets_no_if_hung():
    done = ONE_NODE + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 92.3405\n"
    report = diagnose_report(done.splitlines())
    assert report.findings == [] and report.if_hung == [] and "if_hung" not in report.to_dict()


def test_hung_makes_the_causes_of_a_hang_the_diagnosis():
    report = diagnose_report(ONE_NODE.splitlines(), hung=True)
    assert report.failed and report.hung and report.if_hung == []
    assert cats(report.findings)[0] == "p2p_acs_iommu"
    assert "NCCL_P2P_DISABLE=1" in report.findings[0].fix
    assert len(report.findings) == 3 and "nccl_timeout_or_desync" in cats(report.findings)
    assert report.to_dict()["category"] == "p2p_acs_iommu"


@pytest.mark.parametrize("log, first, never_first", [
    (ONE_NODE, "p2p_acs_iommu", "port_in_use_or_firewall"),
    # several hosts: the interface and the firewall between them, not P2P
    (THREE_HOSTS, "nccl_interface_selection", "p2p_acs_iommu"),
    # one GPU, one rank: no peer and no other node; NCCL's own local sockets
    (ONE_GPU, "port_in_use_or_firewall", "p2p_acs_iommu"),
    # nothing about the run's shape: P2P, the commonest cause of the hangs users report
    ("loading data\nepoch 0 step 0\n", "p2p_acs_iommu", "port_in_use_or_firewall"),
    # Gloo on CPU tensors: no GPU to copy between; a rank that did not reach the collective
    ("dist.init_process_group(backend='gloo')\nepoch 0 step 0\n", "nccl_timeout_or_desync",
     "p2p_acs_iommu"),
])
def test_the_shape_of_the_run_orders_the_causes(log, first, never_first):
    found = cats(diagnose_report(log.splitlines(), hung=True).findings)
    assert found[0] == first and never_first not in found[:2], found


def test_several_hosts_rank_the_firewall_second_and_p2p_out():
    found = cats(diagnose_report(THREE_HOSTS.splitlines(), hung=True).findings)
    assert found[:2] == ["nccl_interface_selection", "port_in_use_or_firewall"], found
    assert "p2p_acs_iommu" not in found


def test_a_watchdog_timeout_is_a_hang_cut_short_the_shape_follows_it():
    """No --hung: the timeout itself says the run hung; it stays first (it is what was seen),
    the causes of a hang on this shape follow it."""
    found = cats(diagnose_report((ONE_NODE + WATCHDOG + "\n").splitlines()).findings)
    assert found[:2] == ["nccl_timeout_or_desync", "p2p_acs_iommu"], found


RETRY = "w0:16:63 [0] NCCL INFO Call to connect returned Connection refused, retrying"


def test_a_log_that_ends_retrying_a_connection_is_stuck_there():
    """A log of refused connects being retried is not "no failure": the run hung connecting,
    and the other end not listening or a firewall come first, not P2P."""
    report = diagnose_report([RETRY] * 12)
    assert report.hung and report.failed
    found = cats(report.findings)
    assert found[0] == "port_in_use_or_firewall" and "p2p_acs_iommu" not in found, found
    assert report.findings[0].evidence["text"].startswith("(log ends) ")
    # retries that a connection then ended are start-up chatter: nothing to report
    later = diagnose_report([RETRY] * 3 + ["w0:16:63 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - "
                                            "Init COMPLETE", "epoch 1 loss 0.3"])
    assert later.findings == [] and not later.hung


def test_a_cause_in_the_log_stays_first_when_the_run_hung():
    log = ONE_NODE + ('Traceback (most recent call last):\n  File "/w/train.py", line 57, in '
                      "<module>\n    x = batch['image']\nKeyError: 'image'\n")
    found = diagnose_report(log.splitlines(), hung=True).findings
    assert found[0].category == "script_error" and found[1].kind == "hang", cats(found)


def test_a_run_record_that_ended_hung_is_read_as_a_hang(tmp_path):
    (tmp_path / "record.json").write_text(json.dumps({"state": "hung"}))
    (tmp_path / "rank0.log").write_text(ONE_NODE)
    report = diagnose_dir(tmp_path)
    assert report.hung and cats(report.findings)[0] == "p2p_acs_iommu"
    # where the launch saw every rank: the straggler outweighs the log's shape
    (tmp_path / "summary.json").write_text(json.dumps({"stacks": {
        "verdict": "straggler: rank 1 (node0); rank 0 waits in all_reduce at train.py:40",
        "stragglers": ["rank 1 (node0)"], "rendezvous": "", "groups": []}}))
    top = diagnose_dir(tmp_path).findings[0]
    assert top.id == "hang-stacks-straggler" and "rank 1 (node0)" in top.title
    # every rank in the same collective, none behind: not a desync, the transport
    (tmp_path / "summary.json").write_text(json.dumps({"stacks": {
        "verdict": "every rank waits in all_reduce", "stragglers": [], "rendezvous": "",
        "groups": [{"ranks": [0, 1], "place": {"kind": "collective"}}]}}))
    found = cats(diagnose_dir(tmp_path).findings)
    assert found[0] == "p2p_acs_iommu" and "nccl_timeout_or_desync" not in found, found
    # every rank in its own code, none in a collective: the script, not the communication
    (tmp_path / "summary.json").write_text(json.dumps({"stacks": {
        "why": "hang", "verdict": "every rank is in module code at sleeper.py:13",
        "stragglers": [], "rendezvous": "",
        "groups": [{"ranks": [0, 1], "place": {"kind": "user",
                                               "text": "module code at sleeper.py:13"}}]}}))
    top = diagnose_dir(tmp_path).findings[0]
    assert top.id == "hang-stacks-own-code" and top.category == "script_error"
    assert "sleeper.py:13" in top.title


def test_a_run_the_user_interrupted_is_not_called_hung(tmp_path):
    """The record ends "interrupted": the user's own stop, even when the launch took stacks
    after a few silent seconds. The log alone speaks (no error: no finding)."""
    (tmp_path / "rank0.log").write_text(ONE_NODE)
    (tmp_path / "record.json").write_text(json.dumps({"state": "interrupted"}))
    (tmp_path / "summary.json").write_text(json.dumps({"stacks": {
        "why": "SIGINT", "verdict": "straggler: rank 1 (node0); rank 0 waits in all_reduce",
        "stragglers": ["rank 1 (node0)"], "rendezvous": "", "groups": []}}))
    report = diagnose_dir(tmp_path)
    assert not report.hung and report.findings == [] and report.if_hung


STRAGGLER = {"verdict": "straggler: rank 1 (node0); rank 0 waits in all_reduce at train.py:40",
             "stragglers": ["rank 1 (node0)"], "rendezvous": "", "groups": []}


@pytest.mark.parametrize("log", [
    ONE_NODE + WATCHDOG + "\n",  # the log's own timeout: same category, the stacks still first
    ONE_NODE + ('Traceback (most recent call last):\n  File "/w/train.py", line 5, in <module>\n'
                "KeyError: 'image'\n"),  # a cause of the log's own
])
def test_the_stacks_come_first_whatever_the_log_says(log):
    found = diagnose_report(log.splitlines(), hung=True, stacks=STRAGGLER).findings
    assert found[0].id == "hang-stacks-straggler", [f.id for f in found]


def test_a_rendezvous_that_never_completed_is_named_from_the_stacks():
    stacks = {"verdict": "", "stragglers": ["node2"], "groups": [],
              "rendezvous": "node0, node1 wait in the rendezvous; node2 never joined"}
    top = diagnose_report(["waiting"], hung=True, stacks=stacks).findings[0]
    assert top.id == "hang-stacks-rendezvous" and top.category == "rendezvous_master_unreachable"
    assert "node2 never joined" in top.title and "ddpkit launch -H" in top.fix


@pytest.mark.parametrize("stacks", [
    {"verdict": 5}, {"rendezvous": True}, {"groups": ["x"]}, {"groups": {"a": 1}},
    {"groups": [{"place": None}]}, {"groups": [{"place": {"text": None, "kind": 3}}]},
    {"flight_recorder": [1]}, {"stragglers": "rank 1"}, {"stragglers": [1], "verdict": ""},
    "not a dict", None, [],
])
def test_a_run_record_of_odd_shape_never_breaks_the_diagnosis(tmp_path, stacks):
    (tmp_path / "record.json").write_text(json.dumps({"state": "hung"}))
    (tmp_path / "summary.json").write_text(json.dumps({"stacks": stacks}))
    (tmp_path / "rank0.log").write_text(ONE_NODE)
    report = diagnose_dir(tmp_path)
    assert report.hung and report.findings[0].category == "p2p_acs_iommu"


def test_a_retry_of_something_else_at_the_end_is_not_a_stuck_connection():
    log = ["epoch 3 done", "WARNING:urllib3.connectionpool:Retrying (Retry(total=4)) after "
           "connection broken by 'ReadTimeoutError(\"Read timed out.\")': /api/runs"]
    report = diagnose_report(log)
    assert not report.hung and report.findings == []


def test_a_fact_far_down_a_noisy_log_is_still_read():
    """Lines picked for a word whose regexes need one hit are skipped only once those regexes
    had it: the 171st line holding "net" still counts."""
    log = ["filler line"] * 70 + ["box:1:1 [0] NCCL INFO NET/Plugin: no plugin found"] * 100 + [
        "box:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0"]
    found = cats(diagnose_report(log, hung=True).findings)
    assert found[:2] == ["nccl_interface_selection", "port_in_use_or_firewall"], found


def test_launch_diagnoses_a_hung_run_from_its_stacks_and_a_stopped_one_not_at_all():
    from types import SimpleNamespace

    from ddpkit.cli.launch import diagnosis

    watch = SimpleNamespace(to_dict=lambda: dict(STRAGGLER, why="hang"), why="hang")
    hung = SimpleNamespace(exit_code=1, reason="hang", log_tail=tuple(ONE_NODE.splitlines()))
    found = diagnosis(hung, watch)
    assert found[0].id == "hang-stacks-straggler", [f.id for f in found]
    # without stacks (they could not be taken), the shape of the run decides
    assert diagnosis(hung, None)[0].category == "p2p_acs_iommu"
    stopped = SimpleNamespace(exit_code=130, reason="SIGINT", log_tail=hung.log_tail)
    assert diagnosis(stopped, watch) == []


def test_the_cli_says_if_it_hung_and_with_hung_says_it_did(tmp_path):
    log = tmp_path / "hang.log"
    log.write_text(ONE_NODE)
    plain = ddpkit("diagnose", str(log))
    assert plain.returncode == 1 and "category: none" in plain.stdout
    assert "if the run hung" in plain.stdout and "[p2p_acs_iommu]" in plain.stdout
    assert "because: the GPUs of one node talk directly" in plain.stdout
    told = ddpkit("diagnose", "--hung", str(log))
    assert told.returncode == 0 and told.stdout.startswith("the run hung:")
    assert "1. [p2p_acs_iommu]" in told.stdout and "because:" in told.stdout
    report = json.loads(ddpkit("diagnose", "--hung", "--json", str(log)).stdout)
    assert report["category"] == "p2p_acs_iommu" and report["hung"] is True


@pytest.mark.parametrize("raw, message", [
    ({"category": "no_such", "prior": 0.1, "title": "t", "fix": "f", "source": "s",
      "explanation": "e"}, "unknown category"),
    ({"category": "p2p_acs_iommu", "prior": 0.1, "title": "t", "fix": "f", "source": "s",
      "explanation": "e", "with": {"no-such-fact": 0.2}}, "no signature"),
])
def test_a_hang_cause_must_name_real_categories_and_facts(raw, message):
    with pytest.raises(KnowledgeBaseError, match=message):
        parse_hang_causes([raw], {"hang-one-gpu"})


def test_a_hang_with_a_file_store_is_the_rendezvous_first():
    """init_method file://: a stale or unshared file keeps init_process_group waiting."""
    log = ["init method: file://distributed.dpt", "backend: nccl", "rank: 0", "n_gpus: 4"]
    report = diagnose_report(log, hung=True)
    assert report.findings[0].category == "rendezvous_master_unreachable", [
        f.category for f in report.findings]
    assert "file" in report.findings[0].evidence["facts"][0]
    # without the file store the same shape keeps its usual first cause
    assert diagnose_report(log[1:], hung=True).findings[0].category != "rendezvous_master_unreachable"


def test_a_hang_with_the_ranks_at_different_steps_is_a_desync_first():
    """Each rank's last progress line names its step: one ran ahead, the others wait."""
    log = ["[rank0]:torchrun --nproc_per_node 2 train.py",
           "[rank1]:2025-08-21 11:19:52 INFO Rank 1 batch 88 loss 12.2",
           "[rank1]:2025-08-21 11:19:52 INFO Rank 1 batch 89 start",
           "[rank0]:2025-08-21 11:19:52 INFO Rank 0 batch 86 loss 12.3",
           "[rank0]:2025-08-21 11:19:52 INFO Rank 0 batch 87 start"]
    report = diagnose_report(log, hung=True)
    top = report.findings[0]
    assert top.category == "nccl_timeout_or_desync", [f.category for f in report.findings]
    assert top.evidence["text"] == "(ranks stopped at different steps) rank 0 at 87, rank 1 at 89"
    assert top.evidence["where"] == "rank 0"  # the rank behind is the one to look at
    # ranks at the same step: no such fact, the usual first cause of a one-node hang
    even = [ln.replace("batch 89", "batch 87").replace("batch 88", "batch 86") for ln in log]
    assert "hang-ranks-at-different-steps" not in str(diagnose_report(even, hung=True).to_dict())


def test_a_hang_with_a_rank_missing_from_the_store_barrier_is_that_rank_first():
    log = [f"I0510 07:28:04.417845 1398 distributed_c10d.py:337] Waiting in store based barrier "
           f"to initialize process group for rank: {r}, key: store_based_barrier_key:2 "
           f"(world_size=8, worker_count=7, timeout=0:30:00)" for r in (2, 7)]
    top = diagnose_report(log, hung=True).findings[0]
    assert top.category == "nccl_timeout_or_desync", top
    assert top.evidence["text"] == "(store barrier short) 7 of 8 ranks arrived"


def test_a_coll_trace_with_two_collectives_at_one_opcount_is_a_desync_first():
    def coll(rank, name, op):
        return (f"node1:4500{rank}:4500{rank} [{rank}] NCCL INFO {name}: opCount {op:x} sendbuff "
                f"0x7f5d recvbuff 0x7f5d count 998 datatype 7 op 0 root 0 comm 0x55be [nranks=2]"
                f" stream 0x55be")
    same = [coll(r, "AllReduce", op) for op in range(0x28a, 0x28e) for r in (0, 1)]
    assert "collectives differ" not in str(diagnose_report(same, hung=True).to_dict())
    parted = same + [coll(0, "AllReduce", 0x28e), coll(1, "AllGather", 0x28e)]
    top = diagnose_report(parted, hung=True).findings[0]
    assert top.category == "nccl_timeout_or_desync"
    assert top.evidence["text"] == "(collectives differ at one opCount) opCount 28e: AllGather, AllReduce"


def test_the_coll_trace_reads_pairs_and_long_runs_as_they_are():
    def coll(host, rank, name, op):
        return (f"{host}:4500{rank}:4500{rank} [{rank}] NCCL INFO {name}: opCount {op:x} sendbuff "
                f"0x7f5d recvbuff 0x7f5d count 998 datatype 7 op 0 root 0 comm 0x55be [nranks=2]"
                f" stream 0x55be")
    # a Send/Recv pair at one opCount is how point-to-point works, not a desync
    pair = [coll("n1", 0, "Send", 0), coll("n1", 1, "Recv", 0)]
    assert "collectives differ" not in str(diagnose_report(pair, hung=True).to_dict())
    # one process with two communicators of one size: no other rank involved
    own = [coll("n1", 0, "AllReduce", 3), coll("n1", 0, "AllGather", 3)]
    assert "collectives differ" not in str(diagnose_report(own, hung=True).to_dict())
    # ranks that part after 5000 collectives are still seen (a hang is at the end)
    long = [coll("n1", r, "AllReduce", op) for op in range(5000) for r in (0, 1)]
    long += [coll("n1", 0, "AllReduce", 5000), coll("n1", 1, "AllGather", 5000)]
    top = diagnose_report(long, hung=True).findings[0]
    assert top.evidence["text"] == "(collectives differ at one opCount) opCount 1388: AllGather, AllReduce"


def test_a_store_barrier_that_completed_later_is_no_missing_rank():
    log = ["Waiting in store based barrier to initialize process group for rank: 0, key: "
           "store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)",
           "Completed store-based barrier for key:store_based_barrier_key:1 with 2 nodes.",
           "epoch 0 step 10 loss 2.31"]
    assert "store barrier short" not in str(diagnose_report(log, hung=True).to_dict())
