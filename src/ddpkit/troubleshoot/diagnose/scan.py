"""One streaming pass over a log (or the logs of a run directory): which regexes of the knowledge
base match where, the Python exceptions, the decisive lines. Memory stays bounded and every
regex runs on a line of at most 4000 characters, and only when the line holds a word the regex
needs (the gate), so a 50 MB log takes seconds, not minutes."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from ddpkit.troubleshoot.diagnose.kb import (
    TOKEN_TABLE,
    WIDE_PUNCT,
    Signature,
    gate_tables,
    tokens,
)
from ddpkit.troubleshoot.diagnose.lines import (
    ANSI,
    LOGGED,
    Line,
    clean,
    english,
    host_column,
    indent_of,
    normalise,
    rewrap,
    unwrap,
)
from ddpkit.troubleshoot.diagnose.pyerrors import DIGITS_0, FRAME, Decisive, Tracebacks

MAX_LINE = 4000
CHUNK_CHARS = 2_000_000
FIRST_LINES = 60  # read one by one: the command that was run is there
TAIL_LINES = 40  # kept per source: the last lines before a silence
MODEL_LINES = 400  # lines kept for the statistical fallback
# Marks of lines the Python-exception and decisive-line readers need, besides error words.
MARKS = ("traceback", 'file "', "error", "exception", "exit", "fail", "fatal", "killed", "abort",
         "denied", "refused", "timed out", "timeout",
         # infixes, not the whole phrase: a first letter the others already have keeps the
         # regex engine's first-character filter selective ("out of memory", "undefined symbol")
         "f memory", "d symbol", "t open file", "o module named",
         # a process killed by a signal says so without any error word ("fault": "default")
         "n fault", "dumped", "l instruction", "sigsegv", "sigbus", "sigabrt", "sigill", "sigkill")
ROOT_MARK = "root cause (first observed failure)"
# The headers of the process tables a user pastes for a hang (ps aux/auxc/auxf, ps -o
# pid,stat,cmd, top), lower case: the rows after one are read one by one (up to TABLE_ROWS).
TABLE_MARKS = ("stat start", " stat cmd", " stat command", "time+ command")
TABLE_ROWS = 64
CUT_MARK = "(traceback cut off)"
LAST_MARK = "(log ends)"  # a source's last line, fed again: what a log stopped on is a fact
STEPS_MARK = "(ranks stopped at different steps)"  # from the last lines of each rank
STORE_FULL, STORE_SHORT = "(store barrier over-full)", "(store barrier short)"
COLL_MARK = "(collectives differ at one opCount)"
# Hang facts whose hits the scanner compares in code (by signature id: their patterns stay in
# the knowledge base alone): NCCL's COLL trace, the store-based barrier's counts, the
# watchdog's timeouts of each rank.
COLL_TRACE, STORE_WAIT = "hang-coll-trace", "hang-store-barrier-waiting"
WATCHDOG_RANKS, COMM_SIZE = "hang-watchdog-rank-timeouts", "hang-nccl-communicator-size"
PROGRESS = "hang-training-progress"
D_ROW, RUN_ROW = "hang-rank-in-d-state", "hang-rank-running-row"
GPU_IDLE, GPU_BUSY = "hang-gpu-idle-among-busy", "hang-gpu-busy-row"
FIRST_MARK = "(every rank timed out in the first collective)"
# Distinct values kept per named group of a regex; a group a `repeat` signature counts keeps
# up to REPEAT_VALUES (a world of 1024 ranks).
VALUES, REPEAT_VALUES = 8, 1024
# A training step, batch or iteration counter as progress lines print it ("step 87", "batch:
# 88", "iter 1200", "Iteration #12").
STEP = re.compile(r"(?i)\b(?:step|batch|iter(?:ation)?)\b\s*[:=#]?\s*(\d+)\b")
ROOT_CAUSE = re.compile(r"\s*(?P<key>rank|host|time)\s*: (?P<value>\S+)")


@dataclass
class Hit:
    line: Line
    groups: dict
    count: int = 1
    places: set = field(default_factory=set)
    values: dict = field(default_factory=dict)  # group -> the distinct values seen (up to 8)


class Scanner:
    def __init__(self, sigs: tuple[Signature, ...], gate: bool = True) -> None:
        self.gate = gate
        self.regexes: list[re.Pattern] = []
        index: dict[str, int] = {}
        fallback: dict[int, set[str]] = {}
        pattern_of: set[int] = set()
        for sig in sigs:
            for rx in sig.patterns + sig.requires + sig.excludes + sig.evidence:
                if rx.pattern not in index:
                    index[rx.pattern] = len(self.regexes)
                    self.regexes.append(rx)
                fallback.setdefault(index[rx.pattern], set()).update(sig.anchors)
            if sig.kind != "hang" or sig.differ:  # a hang fact needs its first line only
                pattern_of.update(index[rx.pattern] for rx in sig.patterns)
        self.index = index
        # A regex that is no signature's pattern (only requires/excludes/evidence) needs only
        # its first hit; a pattern's later hits add the places (ranks) it was seen on, up to 64.
        # A regex whose answer can no longer change is done: it is not run again, and its words
        # stop picking lines (`Init COMPLETE` is on every line of a healthy NCCL log).
        self.once = [i not in pattern_of for i in range(len(self.regexes))]
        # Regexes anchored at the line's start also try the text after a logger's prefix; not
        # those that look ahead from there (`^(?!.*\binfo\b)`: the whole line is their scope).
        self.anchored = frozenset(i for i, rx in enumerate(self.regexes)
                                  if re.match(r"(?:\(\?[aiLmsux]+\))?\^(?!\(\?[!=])", rx.pattern))
        self.done: set[int] = set()
        # Substrings one of which a matching line holds: a C-level test before each search.
        tables = gate_tables(self.regexes) if gate else [(None, None)] * len(self.regexes)
        self.needles = [need for need, _words in tables]
        self.by_word: dict[str, list[int]] = {}
        # No literal word of their own: they run on every line read one by one, and their
        # signature's anchors (substrings: "veth" in "veth6163fba") pick lines for reading.
        self.always: list[int] = []
        extra: set[str] = set()
        for i, (_need, words) in enumerate(tables):
            if words is None:
                self.always.append(i)
                extra.update(fallback[i])
            else:
                for w in words:
                    self.by_word.setdefault(w, []).append(i)
        self.words = frozenset(self.by_word)
        self.digit_words = tuple(sorted(w for w in self.words if w.translate(DIGITS_0) != w))
        self.plain_words = self.words.difference(self.digit_words)
        # (substring, the word whose presence in a chunk's words makes it worth searching for;
        # "" = test the substring itself: "veth" is not a word of "veth6163fba"; the regexes
        # it is an anchor of)
        self.extra = tuple(sorted(
            (w.rstrip("*"), _presence_key(w), frozenset(i for i in self.always if w in fallback[i]))
            for w in extra))
        # words that pick lines for other readers as well (anchors of regexes without words of
        # their own, the marks of the exception and decisive-line readers)
        self._reader_words = frozenset(w for w, _key, _rxs in self.extra).union(MARKS)
        self.hits: dict[int, Hit] = {}
        self.tracebacks = Tracebacks()
        self.decisive = Decisive()
        self.root_cause: dict[str, str] = {}
        self._root_lines = 0
        self._seen: dict[str, int] = {}
        self.tail_raw: dict[str, deque] = {}
        self.model_lines: list[Line] = []
        self.lines = 0
        self._finished = False
        # (source, where, number) -> the line as printed, where `english` changed it (shown)
        self.originals: dict[tuple[str, str, int], str] = {}
        # NCCL's COLL trace: (opCount, nranks) -> (collective, process, its line), the last 4096
        # opCounts; the first two processes seen in different collectives at one opCount
        self.colls: dict[tuple[str, str], tuple[str, str, Line]] = {}
        self.coll_conflict: tuple[str, str, Line] | None = None
        compared = {sig.id: [index[rx.pattern] for rx in sig.patterns] for sig in sigs
                    if sig.id in (COLL_TRACE, STORE_WAIT, WATCHDOG_RANKS, COMM_SIZE, PROGRESS,
                                  D_ROW, RUN_ROW, GPU_IDLE, GPU_BUSY)}
        self._coll_index, self._store_index = (
            compared.get(k, [None])[0] for k in (COLL_TRACE, STORE_WAIT))
        self._watchdog_indexes = compared.get(WATCHDOG_RANKS, [])
        self._size_indexes = compared.get(COMM_SIZE, [])
        self._progress_index = compared.get(PROGRESS, [None])[0]
        self._straggler = {k: compared.get(k, []) for k in (D_ROW, RUN_ROW, GPU_IDLE, GPU_BUSY)}
        # a watchdog line of a process group other than the world: "[rank2]:... [Rank 0]"
        self._subgroup = False
        self.repeated = {sig.repeat for sig in sigs if sig.repeat}
        # (source, where) -> the indent all its lines share (a log pasted as a code block)
        self.indents: dict[tuple[str, str], str] = {}
        self.hosts: dict[tuple[str, str], re.Pattern | None] = {}  # pdsh's "host: " column

    def feed(self, raw: str, number: int, source: str = "", where: str = "",
             regexes_only: bool = False) -> None:
        """One line read one by one. `regexes_only`: a line fed again as a fact (finish()),
        which the exception, decisive-line and model readers already saw."""
        line = normalise(raw, number, source, where)
        if self.originals:
            printed = self.originals.get((source, where, number))
            if printed is not None:
                line = dataclasses.replace(line, shown=normalise(printed, number).text)
        text = line.text
        if not text or text.isspace():
            return
        low = text.lower()
        toks = self.words.intersection(low.translate(TOKEN_TABLE).split())
        candidates = self.always
        if toks:
            candidates = set(self.always)
            for w in toks:
                candidates.update(self.by_word[w])
        plain = None  # whether the line is ASCII (case-insensitive needles need it)
        logged = None  # the text after a logger's prefix ("" when it has none)
        for i in candidates:
            if i in self.done:
                continue
            need = self.needles[i]
            if need is not None:
                subs, ci = need
                if ci:
                    if plain is None:
                        plain = text.isascii()
                    if plain and not any(s in low for s in subs):
                        continue
                elif not any(s in text for s in subs):
                    continue
            m = self.regexes[i].search(text)
            if m is None and i in self.anchored:
                if logged is None:
                    found = LOGGED.match(text)
                    logged = text[found.end():] if found else ""
                if logged:
                    m = self.regexes[i].search(logged)
            if m:
                hit = self.hits.get(i)
                if hit is None:
                    self.hits[i] = Hit(line, {k: v for k, v in m.groupdict().items() if v})
                    hit = self.hits[i]
                elif not regexes_only:  # a line fed again as a fact is not a line more
                    hit.count += 1
                for key, value in m.groupdict().items():
                    if value:
                        seen = hit.values.setdefault(key, set())
                        if len(seen) < (REPEAT_VALUES if key in self.repeated else VALUES):
                            seen.add(value)
                if (i in self._watchdog_indexes and line.where.startswith("rank ")
                        and m.groupdict().get("wrank") not in (None, line.where[5:])):
                    self._subgroup = True
                if i == self._coll_index and not regexes_only:
                    self._collective(m, line)
                if line.where and len(hit.places) < 64:
                    hit.places.add(line.where)
                if self.gate and (self.once[i] or len(hit.places) >= 64):
                    self.done.add(i)
        if regexes_only:
            return
        self.tracebacks.feed(line)
        errors = self.decisive.errors
        self.decisive.feed(line, low)
        self._root(text)
        # What the statistical fallback reads (fallback.py): the first lines of each source
        # and the error lines, the same whether the gate is on or off.
        if len(self.model_lines) < MODEL_LINES and (
                line.number <= FIRST_LINES or self.decisive.errors > errors):
            self.model_lines.append(line)

    def finish(self) -> None:
        """Facts that no single line holds, fed as lines the signatures can match. Each
        source's last line, as "(log ends) <line>" (a connection still being retried there is a
        run stuck connecting: signatures-hang.toml). A source that ends inside a traceback (an excerpt cut short, a rank killed while it waited)
        says where that rank was: "(traceback cut off) in init_process_group at
        distributed_c10d.py:754: <its code line>", numbered as the last frame's line."""
        if self._finished:
            return
        self._finished = True
        steps: dict[str, tuple[int, Line]] = {}  # each rank's last step, from the log's ends
        for q in list(self.tail_raw.values()):
            lines = [normalise(raw, number, source, where) for number, raw, source, where in q]
            lines = [ln for ln in lines if ln.text.strip()]
            if not lines:
                continue
            for ln in lines:
                m = STEP.search(ln.text) if ln.where and len(steps) < 256 else None
                if m:
                    steps[ln.where] = (int(m.group(1)), ln)
            last, code = lines[-1], ""
            self.feed(f"{LAST_MARK} {last.text.strip()}", last.number, last.source, last.where,
                      regexes_only=True)
            frame = FRAME.match(last.text)
            if frame is None and len(lines) > 1 and last.text[:1].isspace():
                last, code = lines[-2], last.text.strip()
                frame = FRAME.match(last.text)
            if frame is None or not frame["func"]:
                continue
            text = f"{CUT_MARK} in {frame['func']} at {frame['path'].rsplit('/', 1)[-1]}:" \
                   f"{frame['line']}" + (f": {code}" if code else "")
            self.feed(text, last.number, last.source, last.where)
        self._store_barrier()
        self._mismatched_collectives()
        self._first_collective()
        self._stragglers()
        if len(steps) > 1 and len({n for n, _ln in steps.values()}) > 1:
            # the ranks' last words name different steps: one ran ahead of (or fell behind)
            # the others, which a hang then leaves waiting in different collectives
            behind = min(steps.values(), key=lambda s: s[0])[1]
            self.feed(f"{STEPS_MARK} " + ", ".join(
                f"{where} at {n}" for where, (n, _ln) in sorted(steps.items())[:8]),
                behind.number, behind.source, behind.where, regexes_only=True)

    def _collective(self, m: re.Match, line: Line) -> None:
        """NCCL_DEBUG_SUBSYS=COLL prints each collective with its opCount: the ranks of one
        communicator call the same one at each count, so two processes in two collectives at
        one count (AllGather on one, AllReduce on another) is a desync no single line shows.
        (Send/Recv pairs are not read: the two sides differ by design.)"""
        if self.coll_conflict is not None:
            return
        key, who = (m["op"], m["nranks"] or ""), m["who"] or line.where
        seen = self.colls.get(key)
        if seen is None:
            if len(self.colls) >= 4096:  # a hang is at the end: forget the oldest count
                del self.colls[next(iter(self.colls))]
            self.colls[key] = (m["coll"], who, line)
        elif seen[0] != m["coll"] and (seen[1] != who or not who):
            self.coll_conflict = (m["op"], ", ".join(sorted((seen[0], m["coll"]))), seen[2])

    def _mismatched_collectives(self) -> None:
        if self.coll_conflict is not None:
            op, names, first = self.coll_conflict
            self.feed(f"{COLL_MARK} opCount {op}: {names}", first.number, first.source,
                      first.where, regexes_only=True)

    def _store_barrier(self) -> None:
        """torch's store-based barrier counts the ranks that reached init_process_group: fewer
        than the world size is a rank that never came; more is a store that already held
        another run's arrivals. A regex cannot compare the two numbers: this feeds the
        comparison as a line of its own (signatures-hang.toml, signatures.toml)."""
        hit = self.hits.get(self._store_index)
        if hit is None or not hit.groups.get("ws") or not hit.groups.get("wc"):
            return
        ws, wc = int(hit.groups["ws"]), int(hit.groups["wc"])
        if wc == ws:
            return
        mark = (f"{STORE_FULL} {wc} arrivals counted for a world of {ws}" if wc > ws else
                f"{STORE_SHORT} {wc} of {ws} ranks arrived")
        self.feed(mark, hit.line.number, hit.line.source, hit.line.where, regexes_only=True)

    def _first_collective(self) -> None:
        """Every rank's watchdog timed out in one and the same collective, the first of the
        run (SeqNum 0 or 1, or none completed before it): all ranks reached it and it never
        completed, which is the transport (P2P, the network), not a rank elsewhere. Every rank:
        ranks 0..N-1 all named, N the communicator's size where NCCL printed it."""
        hits = [self.hits[i] for i in self._watchdog_indexes if i in self.hits]
        if not hits:
            return
        values = self._values(self._watchdog_indexes)
        ranks = sorted(int(r) for r in values.get("wrank", ()))
        seqs, ops = values.get("wseq", set()), values.get("wop", set())
        nccl, nproc = (self.hits.get(i) for i in (self._size_indexes + [None, None])[:2])
        if (len(ranks) < 2 or ranks != list(range(len(ranks))) or len(seqs) != 1
                or len(ops) != 1 or self._subgroup
                # the same size on every rank, printed (torch < 2.0 prints none)
                or len(values.get("wnumel", ())) != 1
                or (nccl is not None and int(nccl.groups["nranks"]) != len(ranks))
                # a rank stuck before the collective prints no watchdog line: fewer ranks
                # than torchrun started is a rank elsewhere
                or (nproc is not None and int(nproc.groups["nproc"]) > len(ranks))
                or not (seqs <= {"0", "1"} or values.get("lastdone") == {"-1"})):
            return
        first = min((h for h in hits if h.groups.get("wrank")), key=lambda h: h.line.number)
        progress = self.hits.get(self._progress_index)
        if progress is not None and (progress.line.source, progress.line.number) < (
                first.line.source, first.line.number):
            return  # losses printed before it: a new process group's first collective
        self.feed(f"{FIRST_MARK} {next(iter(ops))} SeqNum={next(iter(seqs))} on ranks "
                  f"0-{ranks[-1]}", first.line.number, first.line.source, first.line.where,
                  regexes_only=True)

    def _values(self, indexes: list[int]) -> dict[str, set]:
        """The distinct values of each named group over the hits of these regexes."""
        values: dict[str, set] = {}
        for i in indexes:
            for key, seen in self.hits[i].values.items() if i in self.hits else ():
                values.setdefault(key, set()).update(seen)
        return values

    def _stragglers(self) -> None:
        """A row in state D is a rank only beside running rows of the same user and command
        whose memory it is near (a DataLoader worker shares the command line, not the CUDA
        context); an idle GPU is a rank's only with about the memory the busy ones hold.
        Otherwise the row is dropped: it is another job's."""
        d = next((self.hits[i] for i in self._straggler[D_ROW] if i in self.hits), None)
        if d is not None:
            g, run = d.groups, self._values(self._straggler[RUN_ROW])
            rss = [int(v) for v in run.get("rrss", ())]
            if (g.get("dcmd") not in run.get("rcmd", ())
                    or ("duser" in g and g["duser"] not in run.get("ruser", ()))
                    or ("drss" in g and rss and int(g["drss"]) < 0.5 * max(rss))):
                for i in self._straggler[D_ROW]:
                    self.hits.pop(i, None)
        idle = next((self.hits[i] for i in self._straggler[GPU_IDLE] if i in self.hits), None)
        if idle is not None:
            busy = [int(v) for v in self._values(self._straggler[GPU_BUSY]).get("bmem", ())]
            if not any(abs(int(idle.groups["imem"]) - b) <= 0.2 * b for b in busy):
                for i in self._straggler[GPU_IDLE]:
                    self.hits.pop(i, None)

    def _root(self, text: str) -> None:
        """torchrun's summary names the first rank that failed ("Root Cause ... rank : 1")."""
        if text.startswith("Root Cause (first observed failure)"):
            self._root_lines, self.root_cause = 8, {}
        elif self._root_lines:
            self._root_lines -= 1
            m = ROOT_CAUSE.match(text)
            if m:
                self.root_cause.setdefault(m["key"], m["value"])

    def feed_all(self, raws: Iterable[str], source: str = "", where: str = "") -> None:
        """Lines of one source, in order; joined into chunks for the fast path."""
        number, chunk, size = 1, [], 0
        for raw in raws:
            raw = raw.rstrip("\r\n")
            chunk.append(raw[:MAX_LINE] if len(raw) > MAX_LINE else raw)
            size += len(raw)
            if size > CHUNK_CHARS:
                number = self.feed_text("\n".join(chunk), number, source, where)
                chunk, size = [], 0
        if chunk:
            self.feed_text("\n".join(chunk), number, source, where)

    def prepare(self, text: str, number: int, source: str = "", where: str = "") -> str:
        """A chunk of a source without what a paste or a relay added to its lines (clean, the
        indent of a code block, pdsh's host column) and with the rows a terminal cut or a forum
        wrapped joined. A source's first chunk (`number` 1) says which of these it has."""
        text = clean(text)
        key = (source, where)
        if number == 1:  # a source's first chunk says whether every line is indented
            self.indents[key] = indent_of(text)
        if self.indents.get(key):
            text = re.sub("(?m)^" + re.escape(self.indents[key]), "", text)
        unwrapped = unwrap(text)  # (after the indent: a cut row of a code block starts with it)
        cut, text = unwrapped != text, unwrapped
        if number == 1:  # ... and whether pdsh put a host's name before each line
            self.hosts[key] = host_column(text)
        if self.hosts.get(key) is not None:  # as ddpkit launch writes it: the host's line
            text = self.hosts[key].sub(r"\g<host>:- | ", text)  # (after the cut rows, cut
            # with the name, were joined)
        # word-wrapped (after the names: a line behind one is a line of its own)
        return text if cut else rewrap(text)

    def feed_text(self, text: str, number: int, source: str = "", where: str = "") -> int:
        """A chunk of whole lines starting at line `number`; returns the next line's number.
        Only lines holding a word some regex needs, an error word, or a traceback mark are
        read one by one (and the first lines of a source, for the command, and the lines of
        torchrun's root-cause summary); every other line costs only C-level scanning."""
        text = self.prepare(text, number, source, where)
        printed = text
        text = english(text)  # a zh_CN machine's "拒绝连接" is read as "Connection refused"
        if text is not printed:
            for i, (was, now) in enumerate(zip(printed.split("\n"), text.split("\n"))):
                if was != now and len(self.originals) < 10_000:
                    self.originals[(source, where, number + i)] = was
        if self.gate and len(text) > 1000 * (text.count("\n") + 1):
            # Long lines (a stream is not cut like feed_all's lines): nothing past MAX_LINE
            # characters of a line is ever read, so none of it picks lines either.
            text = "\n".join(raw[:MAX_LINE] for raw in text.split("\n"))
        low = text.lower()
        if len(low) != len(text):  # "İ" lowers to two characters: keep offsets aligned
            low = "".join(c if len(c.lower()) != 1 else c.lower() for c in text)
        if not self.gate:  # the reference path: every line read one by one
            for i, raw in enumerate(text.split("\n")):
                self.feed(raw, number + i, source, where)
            self._keep_tail(text, number, source, where)
            return number + low.count("\n") + 1
        # The chunk's distinct words, digits written 0, from its distinct lines (a log repeats
        # a few lines with other numbers): the gate words present, and (joined, a short text)
        # a cheap test of which marks and anchors can be in the chunk at all: each of their
        # words is inside one of the chunk's words. A word with digits is then checked whole.
        shapes = set(low.translate(DIGITS_0).split("\n"))
        tokens = set("\n".join(shapes).translate(TOKEN_TABLE).split())
        bag = "\n".join(tokens)
        done = self.done

        def whole(word: str) -> bool:  # a word of the chunk, as tokens() cuts it
            if word.translate(DIGITS_0) == word:
                return word in tokens
            return word.translate(DIGITS_0) in tokens and _is_whole(low, word)

        def inside(part: str) -> bool:  # inside a word of the chunk (part: letters and digits)
            if part.translate(DIGITS_0) == part:
                return part in bag
            return part.translate(DIGITS_0) in bag and part in low

        present = [w for w in self.plain_words.intersection(tokens)
                   if not done.issuperset(self.by_word[w])]
        present += [w for w in self.digit_words
                    if not done.issuperset(self.by_word[w]) and whole(w)]
        present += [w for w, key, rxs in self.extra if not done.issuperset(rxs)
                    and (whole(key) if key else all(inside(p) for p in _parts(w)))]
        present += [m for m, parts in MARK_PARTS if all(inside(p) for p in parts)]
        # The lines holding one of them as a substring: str.find per word (C-level, far
        # cheaper than one regex of alternatives, which tries them at every character).
        spans: dict[int, int] = {}  # start -> end of each line to read, in text
        # start -> the regexes it was picked for, where each needs one hit only ("p2p" of the
        # hang facts, on every channel line of a healthy NCCL log): once they all had it, the
        # chunk's later lines picked for them alone are skipped. None: a line to read anyway.
        only: dict[int, set | None] = {}
        size = len(low)
        for word in _trigger(frozenset(present)):
            rxs = self._once_only(word, present)
            at = low.find(word)
            while at >= 0:
                start = low.rfind("\n", 0, at) + 1
                end = low.find("\n", at)
                end = size if end < 0 else end
                spans[start] = end
                if rxs is None:
                    only[start] = None
                elif only.get(start, set()) is not None:
                    only.setdefault(start, set()).update(rxs)
                at = low.find(word, end + 1) if end < size else -1
        picked: dict[int, tuple[int, int]] = {}  # line number -> (start, end) in text
        counted, at = 0, number
        for start in sorted(spans):
            at += low.count("\n", counted, start)
            counted = start
            picked[at] = (start, spans[start])
        # torchrun's summary: the lines after it name the first rank to fail; a process
        # table's header: its rows hold no word of their own
        for mark, count in ((ROOT_MARK, 8),) + tuple((m, TABLE_ROWS) for m in TABLE_MARKS):
            found = low.find(mark)
            while found >= 0:
                start = low.rfind("\n", 0, found) + 1
                end = low.find("\n", found)
                end = len(low) if end < 0 else end
                at = number + low.count("\n", 0, start)
                picked[at] = (start, end)
                only[start] = None
                self._pick_following(low, end, at, picked, count, only=only)
                found = low.find(mark, end)
        key = source + "|" + where
        seen = self._seen.get(key, 0)
        if seen < FIRST_LINES:
            self._pick_following(low, -1, number - 1, picked, FIRST_LINES - seen, only=only)
            self._seen[key] = FIRST_LINES
        for at in sorted(picked):
            start, end = picked[at]
            rxs = only.get(start)
            if rxs is not None and not any(self._may_match(i, text, low, start, end)
                                           for i in rxs if i not in done):
                # every regex it was picked for already had its hit, or none can match it: a
                # word of the line ("data" of a DataLoader warning) without the regex's own
                # substring (a py-spy frame's "_try_get_data (")
                continue
            self.feed(text[start:end], at, source, where)
        return self._keep_tail(text, number, source, where)

    def _may_match(self, i: int, text: str, low: str, start: int, end: int) -> bool:
        """Whether line text[start:end] holds one of regex i's needles (as feed() tests them)."""
        need = self.needles[i]
        if need is None:
            return True
        raw = text[start:end]
        if "\x1b" in raw or (raw[:1] == "[" and ANSI.match(raw)):
            return True  # colour codes, which feed() strips first, may split a needle
        subs, ci = need
        if ci:
            line = low[start:end]
            return not line.isascii() or any(s in line for s in subs)
        return any(s in raw for s in subs)

    def _once_only(self, word: str, present: list[str]) -> set | None:
        """The regexes a line holding `word` is read for, when each needs only its first hit;
        None when one needs more, or when a mark or an anchor of its own picks lines for other
        readers."""
        out: set = set()
        for p in present:
            if word in p:
                # a gate word can also pick lines for other readers ("saving", "sigabrt")
                rxs = self.by_word.get(p)
                if rxs is None or p in self._reader_words or not all(self.once[i] for i in rxs):
                    return None
                out.update(rxs)
        return out

    def _keep_tail(self, text: str, number: int, source: str, where: str) -> int:
        last = number + text.count("\n")
        tail = self.tail_raw.setdefault(source + "|" + where, deque(maxlen=TAIL_LINES))
        lines = text.rsplit("\n", TAIL_LINES)[-TAIL_LINES:]
        for i, raw in enumerate(lines):
            tail.append((last - len(lines) + 1 + i, raw[:MAX_LINE], source, where))
        self.lines += last - number + 1
        return last + 1

    @staticmethod
    def _pick_following(low: str, end: int, at: int, picked: dict, count: int = 8,
                        only: dict | None = None) -> None:
        """Add the `count` lines after the line ending at `end` (numbered `at`), to be read."""
        for _ in range(count):
            start = end + 1
            if start > len(low) or (start == len(low) and end >= 0):
                return
            end = low.find("\n", start)
            end = len(low) if end < 0 else end
            at += 1
            picked.setdefault(at, (start, end))
            if only is not None:
                only[start] = None

    def hit(self, rx: re.Pattern) -> Hit | None:
        return self.hits.get(self.index[rx.pattern])


def _presence_key(anchor: str) -> str:
    """The word of a chunk that makes an anchor worth searching for: the anchor itself, the
    longest whole word of a phrase, or "" for a word prefix ("veth*": test the substring)."""
    if anchor.endswith("*"):
        return ""
    words = [w for w in tokens(anchor) if f" {w} " in f" {anchor} "]
    return max(words, key=len) if words else ""


@functools.lru_cache(maxsize=256)
def _trigger(words: frozenset) -> tuple[str, ...]:
    """The substrings that make a line of a lower-cased chunk worth reading."""
    # Plain substrings (a word-boundary test per hit costs more than the few extra lines it
    # saves); a word that holds another one is redundant (the line is found by the shorter one).
    return tuple(sorted(w for w in words if not any(o != w and o in w for o in words)))


def _in_word(ch: str) -> bool:
    """Whether a character is part of a word as tokens() cuts them: an ASCII letter or digit,
    or any other character that is neither white space nor wide punctuation."""
    return ch.isalnum() if ch.isascii() else not (ch.isspace() or ch in WIDE_PUNCT)


def _is_whole(text: str, word: str) -> bool:
    """Whether `word` (letters and digits) is a whole word of `text`."""
    at, size = text.find(word), len(word)
    while at >= 0:
        if not (at and _in_word(text[at - 1])) and not (
                at + size < len(text) and _in_word(text[at + size])):
            return True
        at = text.find(word, at + 1)
    return False


def _parts(text: str) -> tuple[str, ...]:
    """The words of a substring as the tokenizer cuts them ("timed out" -> timed, out)."""
    return tuple(text.translate(TOKEN_TABLE).split())


MARK_PARTS = tuple((m, _parts(m)) for m in MARKS)
