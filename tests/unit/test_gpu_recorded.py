"""What ddpkit read and wrote on a real GPU (an H200, driver 580.159.04, torch 2.11.0+cu130,
NCCL 2.28.9), recorded by scripts/gpu-check.sh on 2026-12-04 and kept as fixtures: the runs
themselves need a GPU, these readings of their output do not."""
import json
from pathlib import Path

import pytest

from ddpkit.nodeside.stackdump import summarise
from ddpkit.troubleshoot.diagnose.matcher import diagnose_report
from ddpkit.troubleshoot.diagnose.rundir import diagnose_dir
from ddpkit.verify.bench.table import Header, header_lines, row_line

FIX = Path(__file__).resolve().parents[1] / "fixtures"
GPU, RUNS = FIX / "gpu", FIX / "diagnose" / "device"


def test_bench_table_lines_up_with_real_all_reduce_perf():
    """The three column-header lines, and each row rebuilt from its own numbers, are the real
    nccl-tests 2.19.6 output character for character (scripts that cut columns keep working)."""
    real = (GPU / "nccl-tests-2.19.6-h200-1gpu.txt").read_text().splitlines()
    ours = header_lines(Header("all_reduce", "nccl", 1, 8, 1 << 28, 2, True, 1, 20, 1))[-3:]
    start = next(i for i, line in enumerate(real) if "out-of-place" in line)
    assert [x.rstrip() for x in ours] == [x.rstrip() for x in real[start:start + 3]]
    rows = [line for line in real if line[:1] == " " and len(line.split()) == 13]
    assert len(rows) == 26
    for line in rows:
        f = line.split()
        part = [{"time_us": float(f[i]), "algbw": float(f[i + 1]), "busbw": float(f[i + 2]),
                 "wrong": int(f[i + 3])} for i in (5, 9)]
        row = {"size": int(f[0]), "count": int(f[1]), "type": f[2], "redop": f[3],
               "root": int(f[4]), "oop": part[0], "ip": part[1]}
        assert row_line(row) == line


def test_bench_json_from_the_gpu_has_every_size_and_no_wrong_values():
    r = json.loads((GPU / "ddpkit-bench-h200-1gpu.json").read_text())
    assert r["backend"] == "nccl" and r["world_size"] == 1
    assert [row["size"] for row in r["rows"]] == [8 << i for i in range(26)]
    assert not any(row[k]["wrong"] for row in r["rows"] for k in ("oop", "ip"))


def test_nccl_flight_recorder_dump_of_a_real_cuda_rank():
    """torch 2.11's NCCL dump (`_dump_nccl_trace`, taken by the watcher thread while the rank
    slept after two all_reduces) reads as two completed collectives; the Gloo-side dump of the
    same process is empty, not an error."""
    nccl = summarise((FIX / "stacks" / "nccl-h200" / "nccl_rank_0").read_bytes(), {})
    assert [(e["seq"], e["op"], e["state"], e["sizes"]) for e in nccl["entries"]] == [
        (1, "nccl:all_reduce", "completed", [[1024]]), (2, "nccl:all_reduce", "completed", [[1024]])]
    assert nccl["pg_status"]["0"]["last_completed_collective"] == 2
    gloo = summarise((FIX / "stacks" / "nccl-h200" / "fr_rank_0").read_bytes(), {})
    assert gloo["entries"] == [] and "error" not in gloo


@pytest.mark.parametrize("run, category, words", [
    # every rank on cuda:0: NCCL 2.28's 'Duplicate GPU detected', with and without NCCL_DEBUG=WARN
    ("dup-gpu", "duplicate_gpu_or_wrong_device", "same GPU"),
    ("dup-gpu-warn", "duplicate_gpu_or_wrong_device", "same GPU"),
    # --nproc-per-node 2 on a machine with one GPU: rank 1's set_device(1)
    ("too-many-procs", "duplicate_gpu_or_wrong_device", "GPU index that does not exist"),
    ("oom", "oom_cuda_error", "out of memory"),
    ("nogpu", "duplicate_gpu_or_wrong_device", "sees no GPU"),  # CUDA_VISIBLE_DEVICES=
    # scripts/gpu/oom.py run by the same script on a CPU-only torch 2.13 (recorded without a GPU):
    # its traceback line reads os.environ["LOCAL_RANK"], but set_device found no CUDA in torch
    ("cpu-build-set-device", "version_mismatch", "without CUDA"),
])
def test_diagnose_names_real_gpu_failures_from_their_run_directories(run, category, words):
    report = diagnose_dir(RUNS / run)
    assert report.findings and report.category == category, [f.title for f in report.findings]
    assert words in report.findings[0].title
    assert report.first_failure.get("source", "").startswith("rank")


def test_too_many_processes_also_names_the_launch_count():
    titles = [f.title for f in diagnose_dir(RUNS / "too-many-procs").findings]
    assert any("More processes were launched on a node than it has GPUs" in t for t in titles)


def test_a_healthy_gpu_run_with_nccl_debug_info_has_no_finding():
    """99 lines of real NCCL INFO (bootstrap, rings, channels, the comm's end) from a run that
    passed: nothing to diagnose."""
    report = diagnose_dir(RUNS / "ok-info")
    assert (RUNS / "ok-info" / "rank0.log").read_text().count("NCCL INFO") > 50
    assert report.findings == [] and not report.failed


# Plain `torchrun --standalone --nproc-per-node 1 examples/ddp_seed_corrected.py` on the H200,
# with NCCL variables set wrong the way users set them: NCCL 2.28.9's own current wording.
@pytest.mark.parametrize("log, category, words", [
    ("ifname-bad-warn", "nccl_interface_selection", "no usable IP interface"),  # NCCL_SOCKET_IFNAME=nosuch0
    ("ifname-bad", "nccl_interface_selection", "no usable IP interface"),  # the same, no NCCL_DEBUG
    ("net-ib-warn", "nccl_interface_selection", "network plugin"),  # NCCL_NET=IB without IB
    ("ib-hca-bad-info", "nccl_interface_selection", "network plugin"),  # and NCCL_IB_HCA=mlx5_99
    ("net-plugin-bad-warn", "nccl_interface_selection", "network plugin"),  # NCCL_NET=nosuchnet
    # runs that passed: NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS=ALL (626 lines), with
    # TORCH_DISTRIBUTED_DEBUG=DETAIL and TORCH_CPP_LOG_LEVEL=INFO (593), and NCCL_ALGO/NCCL_PROTO
    # set to nonsense (NCCL 2.28 warns of nothing on one rank)
    ("ok-info-all", None, ""),
    ("ok-info-warnings", None, ""),
    ("algo-bad-warn", None, ""),
    ("proto-bad-warn", None, ""),
])
def test_nccl_2_28_wording_from_torchrun_logs(log, category, words):
    lines = (RUNS / "torchrun" / f"{log}.log").read_text().splitlines()
    report = diagnose_report(lines)
    if category is None:
        assert report.findings == [], [f.title for f in report.findings]
    else:
        assert report.category == category and words in report.findings[0].title
