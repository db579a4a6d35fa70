"""One streaming pass over a log (or the logs of a run directory): which regexes of the knowledge
base match where, the Python exceptions, the decisive lines. Memory stays bounded and every
regex runs on a line of at most 4000 characters, and only when the line holds a word the regex
needs (the gate), so a 50 MB log takes seconds, not minutes."""

from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from ddpkit.troubleshoot.diagnose.kb import TOKEN_TABLE, Signature, anchors, tokens
from ddpkit.troubleshoot.diagnose.lines import Line, normalise
from ddpkit.troubleshoot.diagnose.pyerrors import Decisive, Tracebacks

MAX_LINE = 4000
CHUNK_CHARS = 2_000_000
FIRST_LINES = 60  # read one by one: the command that was run is there
TAIL_LINES = 40  # kept per source: the last lines before a silence
# Marks of lines the Python-exception and decisive-line readers need, besides error words.
MARKS = ("traceback", 'file "', "error", "exception", "exit", "fail", "fatal", "killed", "abort",
         "denied", "refused", "timed out", "timeout",
         # infixes, not the whole phrase: a first letter the others already have keeps the
         # regex engine's first-character filter selective ("out of memory", "undefined symbol")
         "f memory", "d symbol")
ROOT_MARK = "root cause (first observed failure)"
ROOT_CAUSE = re.compile(r"\s*(?P<key>rank|host|time)\s*: (?P<value>\S+)")


@dataclass
class Hit:
    line: Line
    groups: dict
    count: int = 1
    places: set = field(default_factory=set)


class Scanner:
    def __init__(self, sigs: tuple[Signature, ...], gate: bool = True) -> None:
        self.gate = gate
        self.regexes: list[re.Pattern] = []
        index: dict[str, int] = {}
        fallback: dict[int, set[str]] = {}
        for sig in sigs:
            for rx in sig.patterns + sig.requires + sig.excludes + sig.evidence:
                if rx.pattern not in index:
                    index[rx.pattern] = len(self.regexes)
                    self.regexes.append(rx)
                fallback.setdefault(index[rx.pattern], set()).update(sig.anchors)
        self.index = index
        self.by_word: dict[str, list[int]] = {}
        # No literal word of their own: they run on every line read one by one, and their
        # signature's anchors (substrings: "veth" in "veth6163fba") pick lines for reading.
        self.always: list[int] = []
        extra: set[str] = set()
        for i, rx in enumerate(self.regexes):
            words = anchors(rx) if gate else None
            if words is None:
                self.always.append(i)
                extra.update(fallback[i])
            else:
                for w in words:
                    self.by_word.setdefault(w, []).append(i)
        self.words = frozenset(self.by_word)
        # (substring, the word whose presence in a chunk's words makes it worth searching for;
        # "" = test the substring itself: "veth" is not a word of "veth6163fba")
        self.extra = tuple(sorted((w.rstrip("*"), _presence_key(w)) for w in extra))
        self.hits: dict[int, Hit] = {}
        self.tracebacks = Tracebacks()
        self.decisive = Decisive()
        self.root_cause: dict[str, str] = {}
        self._root_lines = 0
        self._seen: dict[str, int] = {}
        self.tail_raw: dict[str, deque] = {}
        self.lines = 0

    def feed(self, raw: str, number: int, source: str = "", where: str = "") -> None:
        line = normalise(raw, number, source, where)
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
        for i in candidates:
            m = self.regexes[i].search(text)
            if m:
                hit = self.hits.get(i)
                if hit is None:
                    self.hits[i] = Hit(line, {k: v for k, v in m.groupdict().items() if v})
                    hit = self.hits[i]
                else:
                    hit.count += 1
                if line.where and len(hit.places) < 64:
                    hit.places.add(line.where)
        self.tracebacks.feed(line)
        self.decisive.feed(line, low)
        self._root(text)

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

    def feed_text(self, text: str, number: int, source: str = "", where: str = "") -> int:
        """A chunk of whole lines starting at line `number`; returns the next line's number.
        Only lines holding a word some regex needs, an error word, or a traceback mark are
        read one by one (and the first lines of a source, for the command, and the lines of
        torchrun's root-cause summary); every other line costs only C-level scanning."""
        low = text.lower()
        if not self.gate:  # the reference path: every line read one by one
            for i, raw in enumerate(text.split("\n")):
                self.feed(raw, number + i, source, where)
            self._keep_tail(text, number, source, where)
            return number + low.count("\n") + 1
        tokens = set(low.translate(TOKEN_TABLE).split())
        present = self.words.intersection(tokens)
        extra = [w for w, key in self.extra if (key in tokens if key else w in low)]
        trigger = _trigger(frozenset(present).union(extra))
        picked: dict[int, tuple[int, int]] = {}  # line number -> (start, end) in text
        pos, counted, at = 0, 0, number
        while True:
            m = trigger.search(low, pos)
            if m is None:
                break
            start = low.rfind("\n", 0, m.start()) + 1
            end = low.find("\n", m.end())
            end = len(low) if end < 0 else end
            at += low.count("\n", counted, start)
            counted = start
            picked[at] = (start, end)
            pos = end + 1
        root = low.find(ROOT_MARK)
        while root >= 0:  # torchrun's summary: the lines after it name the first rank to fail
            start = low.rfind("\n", 0, root) + 1
            end = low.find("\n", root)
            end = len(low) if end < 0 else end
            at = number + low.count("\n", 0, start)
            picked[at] = (start, end)
            self._pick_following(low, end, at, picked)
            root = low.find(ROOT_MARK, end)
        key = source + "|" + where
        seen = self._seen.get(key, 0)
        if seen < FIRST_LINES:
            self._pick_following(low, -1, number - 1, picked, FIRST_LINES - seen)
            self._seen[key] = FIRST_LINES
        for at in sorted(picked):
            start, end = picked[at]
            self.feed(text[start:end], at, source, where)
        return self._keep_tail(text, number, source, where)

    def _keep_tail(self, text: str, number: int, source: str, where: str) -> int:
        last = number + text.count("\n")
        tail = self.tail_raw.setdefault(source + "|" + where, deque(maxlen=TAIL_LINES))
        lines = text.rsplit("\n", TAIL_LINES)[-TAIL_LINES:]
        for i, raw in enumerate(lines):
            tail.append((last - len(lines) + 1 + i, raw[:MAX_LINE], source, where))
        self.lines += last - number + 1
        return last + 1

    @staticmethod
    def _pick_following(low: str, end: int, at: int, picked: dict, count: int = 8) -> None:
        """Add the `count` lines after the line ending at `end` (numbered `at`)."""
        for _ in range(count):
            start = end + 1
            if start > len(low) or (start == len(low) and end >= 0):
                return
            end = low.find("\n", start)
            end = len(low) if end < 0 else end
            at += 1
            picked.setdefault(at, (start, end))

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
def _trigger(words: frozenset) -> re.Pattern:
    """One regex finding the next line worth reading in a lower-cased chunk."""
    # Plain substrings (a lookaround per position costs more than the few extra lines it saves);
    # a word that holds another one is redundant (the line is found by the shorter one).
    pool = set(words) | set(MARKS)
    alternatives = sorted((w for w in pool if not any(o != w and o in w for o in pool)),
                          key=len, reverse=True)
    return re.compile("|".join(re.escape(w) for w in alternatives))
