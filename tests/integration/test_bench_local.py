"""ddpkit bench with 2 and 4 real Gloo processes on this machine."""

import json

import pytest

from tests.conftest import ddpkit


@pytest.mark.parametrize("nproc", [2, 4])
def test_every_collective_is_correct(nproc, tmp_path):
    out = tmp_path / "bench.json"
    done = ddpkit("bench", "--nproc-per-node", str(nproc), "--collective", "all", "-b", "1K",
                  "-e", "64K", "-f", "8", "-n", "3", "--json-file", str(out), timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["schema"] == 1 and report["backend"] == "gloo" and report["world_size"] == nproc
    ops = {r["op"] for r in report["rows"]}
    assert ops == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
                   "all_to_all", "send_recv"}
    for row in report["rows"]:
        assert set(row) == {"op", "size", "count", "type", "redop", "root", "oop", "ip"}
        for part in ("oop", "ip"):
            assert row[part]["wrong"] == 0, row
            assert set(row[part]) == {"time_us", "algbw", "busbw", "wrong"}
    big = [r for r in report["rows"] if r["op"] == "all_reduce" and r["size"] == 65536][0]
    assert big["oop"]["busbw"] == pytest.approx(big["oop"]["algbw"] * 2 * (nproc - 1) / nproc)
    assert report["avg_busbw"] > 0
    # the table itself, as nccl-tests prints it
    assert done.stdout.count("# Out of bounds values : 0 OK") == 7
    assert "#       size         count      type   redop    root" in done.stdout


def test_a_corrupted_buffer_is_counted_and_fails():
    done = ddpkit("bench", "--nproc-per-node", "2", "-b", "4K", "-e", "8K", "-f", "2",
                  "--corrupt", "all_reduce", timeout=120)
    assert done.returncode == 1
    rows = [ln for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
    assert rows and all(ln.split()[8] == "2" for ln in rows)  # 1 wrong element on each rank
    assert "# Out of bounds values : 8 FAILED" in done.stdout  # 2 sizes x 2 modes x 2 ranks
    assert "wrong value(s)" in done.stderr


def test_min_busbw_and_plot(tmp_path):
    png = tmp_path / "busbw.png"
    done = ddpkit("bench", "--nproc-per-node", "2", "-b", "64K", "-e", "256K", "-f", "2",
                  "--plot", str(png), "--min-busbw", "10000", timeout=120)
    assert done.returncode == 1
    assert "below --min-busbw 10000" in done.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_bench_flags():
    for args in (["-b", "1G", "-e", "1M"], ["-d", "float8"], ["-o", "xor"], ["--collective", "gather"],
                 ["-f", "1"], ["-b", "lots"]):
        done = ddpkit("bench", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr


def test_one_rank_says_why_its_bus_bandwidth_is_zero():
    """One GPU (or one process): busbw is 0 by nccl-tests' definition, which a user reads as a
    broken link unless told; a --min-busbw check cannot pass and is refused before the run."""
    done = ddpkit("bench", "--nproc-per-node", "1", "-b", "1K", "-e", "4K", "-f", "2", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "# Avg bus bandwidth    : 0" in done.stdout
    assert "one rank: bus bandwidth is 0 by definition" in done.stderr
    refused = ddpkit("bench", "--nproc-per-node", "1", "--min-busbw", "1", timeout=120)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--min-busbw needs two or more ranks" in refused.stderr
    assert "--nproc-per-node 2" in refused.stderr and "# Avg bus bandwidth" not in refused.stdout
