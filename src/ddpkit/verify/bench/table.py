"""nccl-tests' output format, reproduced column for column (src/util.cu in nccl-tests 2.19)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddpkit.errors import UsageError
from ddpkit.i18n import _

_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str, flag: str = "-b") -> int:
    """'8', '32K', '256M', '1G' (binary multiples, as nccl-tests reads them)."""
    m = re.match(r"^\s*(\d+)\s*([KMGT]?)i?B?\s*$", text, re.I)
    if not m:
        raise UsageError(_("{flag} {text}: not a size").format(flag=flag, text=text),
                         _("use bytes with an optional K, M or G, e.g. 256M"))
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def float_str(value: float, width: int) -> str:
    """nccl-tests' getFloatStr: the most precise of %.2f, %.1f, %.0f, %.1e that fits."""
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        s = fmt % value
        if len(s) <= width:
            return s
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


@dataclass(frozen=True)
class Header:
    op: str
    backend: str
    world_size: int
    min_bytes: int
    max_bytes: int
    step: int
    factor: bool
    warmup: int
    iters: int
    check: int
    hosts: tuple[str, ...] = ()  # rank -> host


def header_lines(h: Header) -> list[str]:
    step = f"{h.step}({'factor' if h.factor else 'bytes'})"
    lines = [f"# ddpkit bench (nccl-tests compatible): {h.op} on {h.backend}, {h.world_size} ranks",
             f"# nThread 1 nGpus 1 minBytes {h.min_bytes} maxBytes {h.max_bytes} step: {step} "
             f"warmup iters: {h.warmup} iters: {h.iters} agg iters: 1 validation: {h.check} "
             "graph: 0 unalign: 0",
             "#",
             "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 on {host:>10s}" for r, host in enumerate(h.hosts)]
    lines += ["#",
              "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
              % ("", "", "", "", ""),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s "
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                 "(GB/s)", "(GB/s)", "")]
    return lines


def row_line(row: dict) -> str:
    line = "%12d  %12d  %8s  %6s  %6s" % (row["size"], row["count"], row["type"], row["redop"],
                                          "%6i" % row["root"])
    for key in ("oop", "ip"):
        part = row[key]
        body = "  %7s  %6s  %6s" % (float_str(part["time_us"], 7), float_str(part["algbw"], 6),
                                    float_str(part["busbw"], 6))
        body += "    N/A" if part["wrong"] is None else "  %6g" % part["wrong"]
        line += body
    return line


def avg_busbw(rows: list[dict]) -> float:
    """nccl-tests averages busbw over every row, out-of-place and in-place alike."""
    values = [row[k]["busbw"] for row in rows for k in ("oop", "ip")]
    return sum(values) / len(values) if values else 0.0


def wrong_total(rows: list[dict]) -> int:
    return sum(row[k]["wrong"] or 0 for row in rows for k in ("oop", "ip"))


def footer_lines(rows: list[dict], min_busbw: float | None) -> list[str]:
    errors = wrong_total(rows)
    bw = avg_busbw(rows)
    verdict = "" if min_busbw is None else ("FAILED" if bw < min_busbw else "OK")
    return ["# %-20s : %d %s" % ("Out of bounds values", errors, "FAILED" if errors else "OK"),
            "# %-20s : %g %s" % ("Avg bus bandwidth", bw, verdict),
            "#"]
