"""What torch's flight recorder says about a hang, and whether a silent run still steps. Pure
judging of the small per-rank summaries nodeside/stackdump.py (gather) brings back.

Every rank numbers the collectives of a process group 1, 2, 3, ... (collective_seq_id). In a
hang the ranks that arrived wait in collective N; a rank whose last number is lower never
reached it: the straggler. Ranks that show different ops under the same number called
different collectives in the same place: a desync. The dumps carry no stack traces (see
nodeside/bootstrap.py): where a rank waits in its last collective, py-spy's view of it gives
the line (`places`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace

from ddpkit.i18n import _
from ddpkit.troubleshoot.stacks import ranks_word


@dataclass(frozen=True, slots=True)
class Entry:
    seq: int
    op: str  # torch's profiling name: "gloo:all_reduce", "nccl:all_reduce"
    pg: str = "0"  # process group id
    state: str = ""
    sizes: tuple = ()
    file: str = ""  # the user's innermost frame
    line: int = 0
    p2p: bool = False

    @property
    def name(self) -> str:
        return self.op.split(":", 1)[-1] or "?"

    def call(self, name: str = "") -> str:
        """'all_reduce at train.py:30' (the line when known)."""
        name = name or self.name
        return _("{name} at {file}:{line}").format(name=name, file=self.file, line=self.line) \
            if self.file else name

    @classmethod
    def from_dict(cls, d: dict) -> Entry:
        return cls(seq=int(d.get("seq") or 0), op=str(d.get("op", "")),
                   pg=str(d.get("pg_id", d.get("pg", "0"))), state=str(d.get("state", "")),
                   sizes=tuple(tuple(s) for s in d.get("sizes") or ()),
                   file=str(d.get("file", "")), line=int(d.get("line") or 0),
                   p2p=bool(d.get("p2p")))


@dataclass(frozen=True, slots=True)
class RankRecord:
    rank: int
    host: str
    entries: tuple[Entry, ...] = ()
    dumped: bool = False  # a dump came back (it may hold no entries: no group yet)
    steps: int | None = None  # ddpkit.runtime's count, when the script uses it
    step_age_s: float | None = None  # seconds since that count last changed


@dataclass(frozen=True, slots=True)
class FlightReport:
    verdict: str = ""  # "": the recorders name nobody
    stragglers: tuple[str, ...] = ()  # "rank 1 (node1)"
    desync: bool = False
    lines: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()  # the ranks whose dump came back

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "stragglers": list(self.stragglers),
                "desync": self.desync, "lines": list(self.lines), "ranks": list(self.ranks)}


def records_from(nodes) -> list[RankRecord]:
    """One record per rank from the nodes' `watch` replies (a rank seen twice: first wins)."""
    out: dict[int, RankRecord] = {}
    for n in nodes:
        for key, info in (getattr(n, "watch", None) or {}).get("ranks", {}).items():
            rank = int(key)
            if rank in out:
                continue
            dumps = info.get("dumps") or {}
            entries = tuple(Entry.from_dict(e) for d in dumps.values() for e in d.get("entries", []))
            prog = info.get("progress") or {}
            out[rank] = RankRecord(rank, n.host, entries, bool(dumps), prog.get("steps"),
                                   prog.get("age_s"))
    return [out[r] for r in sorted(out)]


def advancing(records: list[RankRecord], within_s: float) -> list[RankRecord]:
    """Ranks whose step count changed less than within_s seconds ago (the run's silence so
    far): a silent run that still steps is not hung."""
    return [r for r in records if r.step_age_s is not None and r.step_age_s < within_s]


def judge_flight(records: list[RankRecord],
                 places: dict[int, tuple[str, int]] | None = None) -> FlightReport:
    """places: rank -> (file, line) of the collective py-spy saw it wait in."""
    dumped = [r for r in records if r.dumped]
    ranks = tuple(r.rank for r in dumped)
    hosts = {r.rank: r.host for r in dumped}
    pg = _main_group(dumped)
    if pg is None:
        return FlightReport(ranks=ranks)
    by_rank = {r.rank: [e for e in r.entries if e.pg == pg and not e.p2p] for r in dumped}
    lines = []
    last = {rank: max((e.seq for e in es), default=0) for rank, es in by_rank.items()}
    by_rank = {rank: [_placed(e, last[rank], (places or {}).get(rank)) for e in es]
               for rank, es in by_rank.items()}
    desync = _desync(by_rank)
    if desync:
        lines.append(desync)
    top = max(last.values())
    behind = sorted(r for r, n in last.items() if n < top)
    ahead = sorted(r for r, n in last.items() if n == top)
    named: list[str] = []
    if behind and top:
        wait = next(e for e in by_rank[ahead[0]] if e.seq == top)
        for n in sorted({last[r] for r in behind}):
            who = [r for r in behind if last[r] == n]
            lines.append(_("{ranks} entered {n} collective(s), the others {top}: they wait in "
                           "{call}; {ranks} never reached it").format(
                ranks=ranks_word(who), n=n, top=top, call=wait.call(f"{wait.name} #{top}")))
        named = [f"{ranks_word([r])} ({hosts[r]})" for r in behind]
    if desync and not named:
        named = _odd_ones(by_rank, hosts)
    verdict = ""
    if named:
        verdict = _("flight recorder: straggler: {stragglers}").format(stragglers="; ".join(named))
    return FlightReport(verdict, tuple(named), bool(desync), tuple(lines), ranks)


def _placed(e: Entry, last: int, place: tuple[str, int] | None) -> Entry:
    """The rank's last collective, where it waits now, at the line py-spy saw."""
    if e.file or place is None or e.seq != last:
        return e
    return replace(e, file=place[0], line=place[1])


def _main_group(dumped: list[RankRecord]) -> str | None:
    """The process group most ranks recorded collectives in (the default group, usually)."""
    count: dict[str, set[int]] = defaultdict(set)
    for r in dumped:
        for e in r.entries:
            if not e.p2p:
                count[e.pg].add(r.rank)
    if not count:
        return None
    return max(sorted(count), key=lambda pg: len(count[pg]))


def _desync(by_rank: dict[int, list[Entry]]) -> str:
    """The first collective number under which the ranks recorded different ops (or the
    same op with different tensor sizes)."""
    at: dict[int, dict[int, Entry]] = defaultdict(dict)
    for rank, es in by_rank.items():
        for e in es:
            at[e.seq][rank] = e
    for seq in sorted(at):
        seen = at[seq]
        kinds: dict[tuple, list[int]] = defaultdict(list)
        for rank, e in sorted(seen.items()):
            kinds[(e.name, e.sizes)].append(rank)
        if len(seen) < 2 or len(kinds) < 2:
            continue
        parts = []
        for (_name, sizes), who in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[1])):
            e = seen[who[0]]
            parts.append(f"{ranks_word(who)}: {e.call()} {_sizes(sizes)}".rstrip())
        return _("desync at collective #{seq}: {calls}").format(seq=seq, calls="; ".join(parts))
    return ""


def _sizes(sizes: tuple) -> str:
    return "[" + ", ".join("x".join(str(d) for d in s) or "scalar" for s in sizes) + "]" \
        if sizes else ""


def _odd_ones(by_rank: dict[int, list[Entry]], hosts: dict[int, str]) -> list[str]:
    """In a desync with equal counts: the ranks in the minority at the first differing
    number (with two equal halves, both are named)."""
    at: dict[int, dict[int, tuple]] = defaultdict(dict)
    for rank, es in by_rank.items():
        for e in es:
            at[e.seq][rank] = (e.name, e.sizes)
    for seq in sorted(at):
        kinds: dict[tuple, list[int]] = defaultdict(list)
        for rank, kind in at[seq].items():
            kinds[kind].append(rank)
        if len(kinds) > 1:
            biggest = max(len(v) for v in kinds.values())
            odd = sorted(r for v in kinds.values() if len(v) < biggest for r in v)
            odd = odd or sorted(r for v in kinds.values() for r in v)
            return [f"{ranks_word([r])} ({hosts[r]})" for r in odd]
    return []
