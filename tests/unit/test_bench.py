"""nccl-tests compatibility: bus bandwidth factors, sizes, the table's column layout."""

import pytest

from ddpkit.errors import UsageError
from ddpkit.nodeside.bench_job import busbw_factor, layout, sizes
from ddpkit.verify.bench.pairs import judge_pairs
from ddpkit.verify.bench.table import (
    Header,
    avg_busbw,
    float_str,
    footer_lines,
    header_lines,
    parse_size,
    row_line,
    wrong_total,
)


@pytest.mark.parametrize("op, n, factor", [
    ("all_reduce", 2, 1.0), ("all_reduce", 8, 1.75), ("all_gather", 4, 0.75),
    ("reduce_scatter", 8, 0.875), ("all_to_all", 2, 0.5), ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0), ("send_recv", 8, 1.0)])
def test_busbw_factors(op, n, factor):
    assert busbw_factor(op, n) == pytest.approx(factor)


@pytest.mark.parametrize("text, value", [("8", 8), ("32K", 32768), ("256M", 268435456),
                                         ("1G", 1073741824), ("4m", 4194304)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "x", "1.5M", "-8", "12Q"])
def test_bad_size(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_sizes_by_factor_and_by_step():
    assert sizes(8, 256 * 2**20, 0, 2)[:3] == [8, 16, 32]
    assert sizes(8, 256 * 2**20, 0, 2)[-1] == 256 * 2**20
    assert sizes(1 << 20, 3 << 20, 1 << 20, 0) == [1 << 20, 2 << 20, 3 << 20]


@pytest.mark.parametrize("op, size, elt, n, expect", [
    # (count, send, recv, reported bytes, alg bytes), as nccl-tests sizes them
    ("all_reduce", 1024, 4, 8, (256, 256, 256, 1024, 1024)),
    ("all_gather", 1024, 4, 8, (32, 32, 256, 1024, 1024)),
    ("reduce_scatter", 1024, 4, 8, (32, 256, 32, 1024, 1024)),
    ("all_to_all", 1024, 4, 8, (32, 256, 256, 1024, 1024)),
    ("all_gather", 100, 4, 2, (12, 12, 24, 96, 96)),  # 16-byte aligned chunks
    ("all_gather", 8, 4, 2, (0, 0, 0, 0, 0)),
    ("send_recv", 64, 2, 4, (32, 32, 32, 64, 64)),
])
def test_layout(op, size, elt, n, expect):
    assert layout(op, size, elt, n) == expect


@pytest.mark.parametrize("value, width, text", [
    (12.3456, 7, "  12.35"), (12345.678, 7, "12345.7"), (1234567.0, 7, "1234567"),
    (123456789.0, 7, "1.2e+08"), (0.0, 6, "  0.00"), (1.29, 6, "  1.29")])
def test_float_str_matches_nccl_tests(value, width, text):
    assert float_str(value, width) == text


ROW = {"op": "all_reduce", "size": 33554432, "count": 8388608, "type": "float", "redop": "sum",
       "root": -1, "oop": {"time_us": 29153.2, "algbw": 1.15, "busbw": 1.15, "wrong": 0},
       "ip": {"time_us": 26761.04, "algbw": 1.2539, "busbw": 1.2539, "wrong": 0}}


def test_row_is_the_nccl_tests_line():
    # nccl-tests: "%12li  %12li  %8s  %6s  %6s" then per part "  %7s  %6s  %6s  %6g"
    assert row_line(ROW) == ("    33554432       8388608     float     sum      -1  29153.2"
                             "    1.15    1.15       0  26761.0    1.25    1.25       0")


def test_header_columns_line_up_with_the_rows():
    lines = header_lines(Header("all_reduce", "gloo", 2, 8, 64, 2, True, 1, 20, 1, ("a", "b")))
    names = next(ln for ln in lines if "#wrong" in ln)
    row = row_line(ROW)
    # the right edge of each header word is the right edge of its column in the rows
    for word, value in (("size", "33554432"), ("count", "8388608"), ("type", "float"),
                        ("root", "-1")):
        assert names.index(word) + len(word) == row.index(value) + len(value), word
    first_wrong = names.index("#wrong") + len("#wrong")
    assert row[first_wrong - 1] == "0"
    assert "step: 2(factor)" in lines[1] and "iters: 20" in lines[1]


def test_footer_and_totals():
    bad = dict(ROW, ip=dict(ROW["ip"], wrong=3))
    assert wrong_total([ROW, bad]) == 3
    assert avg_busbw([ROW]) == pytest.approx((1.15 + 1.2539) / 2)
    lines = footer_lines([bad], min_busbw=5.0)
    assert lines[0] == "# Out of bounds values : 3 FAILED"
    assert lines[1].startswith("# Avg bus bandwidth    : 1.2") and lines[1].endswith("FAILED")


def test_pairs_name_the_slow_node():
    pairs = [("a", "b", 1.7), ("a", "c", 0.05), ("b", "c", 0.05)]
    v = judge_pairs(pairs, ["a", "b", "c"])
    assert v.slow_node == "c" and v.slowest_link[2] == 0.05


def test_pairs_name_a_slow_link_only():
    pairs = [("a", "b", 1.7), ("a", "c", 1.6), ("b", "c", 0.2), ("a", "d", 1.65),
             ("b", "d", 1.7), ("c", "d", 1.6)]
    v = judge_pairs(pairs, ["a", "b", "c", "d"])
    assert v.slow_node == "" and v.slow_link and v.slowest_link[:2] == ("b", "c")


def test_even_pairs_name_nothing():
    v = judge_pairs([("a", "b", 1.0), ("a", "c", 1.1), ("b", "c", 0.9)], ["a", "b", "c"])
    assert v.slow_node == "" and not v.slow_link
