"""Point-to-point bandwidth between every pair of nodes: the matrix and the slow node or link."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddpkit.i18n import _

SLOW = 0.5  # "clearly below": under half of what the other links manage


@dataclass(frozen=True)
class PairVerdict:
    slow_node: str  # "" when no node is clearly slower
    slowest_link: tuple[str, str, float]
    slow_link: bool  # the slowest link is clearly below the others
    note: str


def matrix(pairs: list[tuple[str, str, float]], hosts: list[str]) -> dict[tuple[str, str], float]:
    out = {}
    for a, b, gbps in pairs:
        out[(a, b)] = out[(b, a)] = gbps
    return out


def judge_pairs(pairs: list[tuple[str, str, float]], hosts: list[str]) -> PairVerdict:
    """A node is slow when every link it has is below SLOW x the median of the links it is not
    part of; the slowest link is named when it is below SLOW x the median of all others."""
    if not pairs:
        return PairVerdict("", ("", "", 0.0), False, _("fewer than two nodes"))
    slow_node = ""
    for h in hosts:
        mine = [g for a, b, g in pairs if h in (a, b)]
        others = [g for a, b, g in pairs if h not in (a, b)]
        if mine and others and max(mine) < SLOW * statistics.median(others):
            slow_node = h
            break
    a, b, g = min(pairs, key=lambda p: p[2])
    rest = [p[2] for p in pairs if p is not min(pairs, key=lambda q: q[2])]
    slow_link = bool(rest) and g < SLOW * statistics.median(rest)
    if slow_node:
        note = _("{node} is clearly slower: every link to it is below half of the others").format(
            node=slow_node)
    elif slow_link:
        note = _("the link {a} <-> {b} is clearly slower than the others").format(a=a, b=b)
    else:
        note = _("no node or link is clearly slower than the others")
    return PairVerdict(slow_node, (a, b, g), slow_link, note)
