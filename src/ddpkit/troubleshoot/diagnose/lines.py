"""One log line as the matcher sees it: colours and per-rank prefixes removed, where it came from
(host, rank) and when (a timestamp, where the line has one)."""

from __future__ import annotations

import datetime
import functools
import html
import re
from dataclasses import dataclass

from ddpkit.data import load_toml

# Colour codes, also as pasted into issue threads without their ESC byte ("[0m ").
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|^(?:\[[0-9;]{1,5}m)+ ?")
# Per-rank prefixes a log line may carry; each may appear nested in another. Named groups say
# where the line came from. _prefixes_for picks the ones a line's first characters allow.
LAUNCH = re.compile(r"(?P<host>[\w.\-]+):(?P<rank>\d+|-) +\| ")  # ddpkit launch
TEE_RANK = re.compile(r"\[rank(?P<rank>\d+)\]: ?")  # torchrun's tee / torch's own tracebacks
TEE_DEFAULT = re.compile(r"\[default(?P<local>\d+)\]: ?")  # torchrun's default tee prefix
# mpirun/horovodrun ("[1,2]<stderr>:"), horovodrun's Gloo launcher ("[2]<stderr>:")
MPI_TAG = re.compile(r"\[(?:(?P<job>\d+),)?(?P<rank>\d+)\]<(?:stdout|stderr)>: ?")
SRUN = re.compile(r"(?P<rank>\d+): ")  # srun -l
# Ray's worker prefix: "(RayTrainWorker pid=1234, ip=10.0.0.1) "
RAY = re.compile(r"\((?:[A-Za-z_][\w.:]* )?pid=(?P<pid>\d+)(?:, ip=(?P<host>[\w.:\-]+))?[^)]{0,80}\) ")
COMPOSE = re.compile(r"(?P<host>[\w.\-]+?[_-]\d+)\s+\| ")  # docker compose: "trainer_1  | "
# kubectl logs --prefix: "[pod/trainer-worker-0/pytorch] "
KUBECTL = re.compile(r"\[pod/(?P<host>[\w.\-]+)/[\w.\-]+\] ?")
# SkyPilot: "(head, rank=0, pid=2515) ", "(worker1, rank=1, pid=2233, ip=10.0.0.3) "
SKYPILOT = re.compile(r"\((?P<host>[\w.\-]+), rank=(?P<rank>\d+), pid=\d+(?:, ip=[\w.:\-]+)?\) ")
# What a web page or a log collector adds to every line of a log pasted into a thread: HTML
# entities (&quot;), non-breaking and other wide spaces, e-mail/markdown quote marks ("> "),
# markdown code fences (a fence is no line of the log: blank it, so the log's last line stays its
# own), and journald/syslog's prefix ("Dec 01 10:00:01 host python[123]: "). Removed chunk by
# chunk, before anything reads the text; each test is a C-level scan of the chunk (a
# str.translate of the whole chunk would cost 90 ms per 2 MB of any non-ASCII text). An ISO
# stamp (kubectl --timestamps, docker logs -t, Python logging) is cut line by line instead
# (normalise, STAMPED): its time orders the lines of a run directory.
ENTITY = re.compile(r"&(?:#\d{1,5}|#x[0-9a-fA-F]{1,4}|quot|amp|lt|gt|apos|nbsp);")
SPACES = re.compile("[\u00a0\u2002\u2003\u2007\u2009\u200a\u202f\u205f]")
QUOTED = re.compile(r"(?m)^(?:> ?)+")
FENCE = re.compile(r"(?m)^[ \t]*(?:```|~~~)[\w+\-]*[ \t]*$")
COLLECTOR = re.compile(
    r"(?m)^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.\-]+ [\w.\-/]+(?:\[\d+\])?: ")


def _unescape(m: re.Match) -> str:
    char = SPACES.sub(" ", html.unescape(m.group()))  # &nbsp;
    return char if char.isprintable() else m.group()  # &#10; stays: lines keep their numbers


def clean(text: str) -> str:
    """A chunk of lines without what a web page or a log collector added to it (ENTITY...)."""
    if "&" in text and ";" in text:
        text = ENTITY.sub(_unescape, text)
    if not text.isascii() and SPACES.search(text):
        text = SPACES.sub(" ", text)
    if text[:1] == ">" or "\n>" in text:
        text = QUOTED.sub("", text)
    if "```" in text or "~~~" in text:
        text = FENCE.sub("", text)
    if COLLECTOR.match(text.lstrip("\n")[:200]):  # a collector stamps every line, the first too
        text = COLLECTOR.sub("", text)
    return text


# The start of a line that is a record of its own, never the rest of a cut one.
NEW_RECORD = re.compile(r"Traceback \(|[\w.]*(?:Error|Exception|Warning):|\[|\d{4}-\d\d-\d\d[ T]|"
                        r"[IWEF]\d{4} \d\d:")


def unwrap(text: str) -> str:
    """A chunk copied from a terminal that cut every long line at its width W (several lines
    exactly W characters long, none longer, 60 <= W <= 400) with each cut line joined to the
    next; the line that continued one is left blank, so every line keeps its number. Rows of a
    table (nccl-tests, nvidia-smi, a topology matrix) are as wide as each other too: a row is
    never taken for a continuation when it starts with two blanks, a tab or a border (one
    blank: the cut fell before a space), or as the line
    before it does, nor when it starts a record of its own (NEW_RECORD); one line printed by
    every rank is as wide on each: the width must hold 3 different lines, with 3 different
    endings (records of one format end alike, "... Init COMPLETE", where a cut falls anywhere)."""
    rows = text.split("\n")
    longest = max(map(len, rows))
    if not 60 <= longest <= 400:
        return text
    wide = {row[-8:] for row in rows if len(row) == longest}
    if len(wide) < 3 or sum(len(r) == longest for r in rows) * 50 < len(rows):
        return text

    def continues(i: int, j: int) -> bool:  # row j was cut, row j + 1 is its rest
        nxt = rows[j + 1]
        return (len(rows[j]) == longest and bool(nxt)
                and not nxt[(nxt[:1] == " "):][:1].isspace() and nxt[0] not in "|+"
                and nxt[:3] != rows[i][:3] and not NEW_RECORD.match(nxt))

    return _join_runs(rows, continues, "")


def _join_runs(rows: list[str], continues, sep: str, most: int = 0) -> str:
    """Each run of rows that `continues(first, j)` says go on (row j + 1 is the rest of row j),
    joined with `sep` into its first row, the others left blank: every line keeps its number.
    `most`: the longest run, in rows after the first (0: no limit)."""
    i = 0
    while i < len(rows) - 1:
        j = i
        while j < len(rows) - 1 and (not most or j - i < most) and continues(i, j):
            j += 1
        if j > i:
            rows[i] = sep.join(rows[i:j + 1])
            for k in range(i + 1, j + 1):
                rows[k] = ""
        i = j + 1
    return "\n".join(rows)


# The start of a line that is one record of many: an NCCL line ("node1:123:456 [0] "), a shell
# prompt ("(venv) root@node1:~# ", "$ "), a listing ("drwxr-xr-x", "lrwxrwxrwx").
ROW_RECORD = re.compile(r"[\w.\-]+:\d+:\d+ \[\d+\]|(?:\([\w.\-]+\) )?[\w.\-]+@[\w.\-]+|[$#%>] "
                        r"|[-dlcbps][-rwxsStT]{9}")


# A row complete as it stands, never continued, and a line of its own: a traceback's frame line
# (its code line, pasted without its indent, is a line of its own too), a separator (one
# character repeated).
COMPLETE = re.compile(r'\s*File "[^"]*", line \d+|(.)\1{9}')
# The start of a record NEW_RECORD does not name: NCCL's own error names ("ncclInvalidUsage:"),
# a line of NCCL's (behind any prefix).
OWN_LINE = re.compile(r"nccl[A-Z]\w*:|[\w.]*(?:Error|Exception|Warning|Usage|Failure)\b"
                      r"|.{0,80}\bNCCL (?:INFO|WARN|TRACE)\b"
                      # Python logging's level first ("ERROR:torch.distributed...")
                      r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b")


def _own_line(row: str) -> bool:
    """The row starts a line of its own: a record, a prefix a launcher put on every line."""
    return bool(NEW_RECORD.match(row) or ROW_RECORD.match(row) or OWN_LINE.match(row)
                or COMPLETE.match(row) or any(rx.match(row) for rx in _prefixes_for(row)))


# Words aligned in columns (three blanks or more between two of them): a table's row, which a
# forum's wrapping never makes.
COLUMNS = re.compile(r"\S {3,}\S")


def rewrap(text: str) -> str:
    """A chunk whose long lines a forum, an e-mail or a text widget word-wrapped at a width W:
    a row was broken only where the next word would not fit (its length, a space and the next
    row's first word exceed W). Such a row is joined to the rows (10 at most) that continue it,
    with a space, the continuation rows left blank (every line keeps its number). Of the rows
    within 20 characters of W whose next row could continue them (could()), most must break
    that way, and two or more unless there is only the one: in a log nobody wrapped, the
    longest lines are mostly followed by lines of their own. A row never continues one when it
    starts with a blank, a border, a line of its own (_own_line: a record, a launcher's prefix,
    an NCCL line, a logging level) or as the row before it does, nor when either is a table's
    row; a frame line or a separator is never continued."""
    rows = text.split("\n")
    longest = max(map(len, rows))
    if not 60 <= longest <= 400:
        return text

    def could(i: int) -> bool:  # the next row could be the rest of this one
        row, nxt = rows[i], rows[i + 1]
        return (bool(row) and bool(nxt) and not nxt[0].isspace() and nxt[0] not in "|+#"
                and not _own_line(nxt) and not COLUMNS.search(row) and not COLUMNS.search(nxt))

    def breaks(i: int) -> bool:  # ... and is: the next row's first word did not fit on it
        row, nxt = rows[i], rows[i + 1]
        if not could(i) or row[-1].isspace() or nxt[:3] == row[:3] or COMPLETE.match(row):
            return False
        return len(row) + 1 + len(nxt.split(None, 1)[0]) > longest

    # (rows followed by an indented code line, a frame or a record of their own say nothing
    # either way: a traceback's long frame lines are followed by their code lines)
    near = [i for i in range(len(rows) - 1) if len(rows[i]) >= longest - 20 and could(i)]
    at = [i for i in near if breaks(i)]
    if not at or (len(at) < 2 and len(near) > 1) or len(at) * 5 < len(near) * 3:
        return text
    # (any row that breaks: one before a long word may be short; with a space: the longest row
    # is W long, cut or wrapped alike)
    return _join_runs(rows, lambda _first, j: breaks(j), " ", most=10)


HOST_COLUMN = re.compile(r"([A-Za-z0-9][\w.\-]*): ")
# What a line may start with that is no host: an exception or a level ("RuntimeError: "), a
# program ("python3: can't open file"), a logger's dotted module path with no digit or dash
# ("torch.distributed.elastic.multiprocessing.api: "), a rank number alone (srun -l: "0: ").
NOT_HOST = re.compile(r"(?i).*(?:error|exception|warning|info|debug|note|traceback|file|line)$"
                      r"|(?:python|pypy|pip|conda|bash|sh|mpirun|mpiexec|srun|torchrun|deepspeed"
                      r"|accelerate|horovodrun|ssh|pdsh)[\d.]*$|[^\d\-]*\.[^\d\-]*$|\d+$")


def host_column(text: str, lines: int = 40) -> re.Pattern | None:
    """pdsh (deepspeed's multi-node runner), clush and `parallel --tag` put "host: " before
    every line they relay. Half or more of a source's first non-blank lines (3 or more, or both
    of two) starting with one
    of at most 16 such names, each with a digit, a dash or a dot as host names have
    (worker-1, node01, 10.0.0.2) and none an exception, a level, a program, a module path or
    a rank number alone (NOT_HOST): a regex that takes the
    column off those names (its group "host"); None otherwise."""
    rows = [r for r in text.split("\n", lines * 3)[:lines * 3] if r.strip()][:lines]
    hosts: dict[str, int] = {}
    for row in rows:
        m = HOST_COLUMN.match(row)
        if m:
            hosts[m.group(1)] = hosts.get(m.group(1), 0) + 1
    seen = sum(hosts.values())
    if seen * 2 < len(rows) or seen < 2 or (seen < 3 and seen < len(rows)) or len(hosts) > 16:
        return None  # (two lines are a column only when both have it)
    if any(NOT_HOST.match(h) or not re.search(r"[\d.\-]", h) for h in hosts):
        return None
    names = "|".join(map(re.escape, sorted(hosts, key=len, reverse=True)))
    return re.compile(f"(?m)^(?P<host>{names}): ")


def indent_of(text: str, lines: int = 40) -> str:
    """The indent every one of a source's first non-blank lines shares ("    " for a log pasted
    as a markdown code block), "" when they share none."""
    common = None
    for line in text.split("\n", lines * 2)[:lines * 2]:
        if not line.strip():
            continue
        lead = line[:len(line) - len(line.lstrip(" \t"))]
        common = lead if common is None else common[:next(
            (i for i, (a, b) in enumerate(zip(common, lead)) if a != b), min(len(common), len(lead)))]
        if not common:
            return ""
    return common or ""


MAX_LINE = 4000  # longer lines are cut: no regex ever sees an unbounded line

# Timestamps at the start of a line (after its prefixes): ISO / Python logging, and glog
# (torch's C++ logs: "[E501 12:34:56.789 ..." / "E0501 12:34:56.789 ...").
ISO = re.compile(r"\[?(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d+))?")
# (one separator only: what follows keeps its own indent, a traceback's code line)
STAMPED = re.compile(ISO.pattern + r"(?:Z|[+-]\d\d:?\d\d)?\]?(?: ?[|\-] |\s|(?=\[))")
GLOG = re.compile(r"\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")
# What a logger puts before its message, once the stamp is cut (normalise): Python logging's
# `root - ERROR - ` and `ERROR:root:`, DeepSpeed's `[ERROR] [launch.py:321:main] `, loguru's
# `ERROR    | mod:fn:12 - `, vLLM's `ERROR 05-01 10:00:00 [file.py:12] `, glog's `E0501 ...] `,
# Lightning's `[rank: 1] `. A regex anchored at the line's start also tries the text after it
# (scan.py): the same message, printed through a logger.
LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|SUCCESS)"
LOGGED = re.compile(
    r"(?:[\w.<>\-]+ - " + LEVEL + r" - |" + LEVEL + r":[\w.<>\-]+:|\[" + LEVEL + r"\] ?"
    r"(?:\[[\w./<>\-]+:\d+:?[\w<>]*\] ?)?|" + LEVEL + r" +\| [\w.<>:\-]+ - |"
    + LEVEL + r" \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./\-]+:\d+\] |"
    + GLOG.pattern + r" +\d+ [\w./\-]+:\d+\] ?|\[rank: ?\d+\] ){1,3}")


@functools.lru_cache(maxsize=None)
def _localized() -> tuple[re.Pattern, dict[str, tuple[tuple[str, str], ...]]]:
    """The translated phrases (a few hundred, nine locales) by their first non-ASCII character,
    and a pattern of those characters: a line is checked only against phrases that can be in
    it. A phrase without any non-ASCII character (German or French without accents) is left
    out: `english` never reads an all-ASCII line, and checking it in every mixed one costs."""
    table = load_toml("localized_errors.toml")
    index: dict[str, list[tuple[str, str]]] = {}
    for lang in table.values():
        for loc, eng in lang.items():
            first = next((ch for ch in loc if ord(ch) > 127), None)
            if first and loc != eng:
                index.setdefault(first, []).append((loc, eng))
    firsts = re.compile("[" + re.escape("".join(sorted(index))) + "]")
    return firsts, {first: tuple(group) for first, group in index.items()}


def english(text: str) -> str:
    """A log text with the system's error phrases of a non-English locale put back in English
    (拒绝连接 -> Connection refused, Getötet -> Killed), so one signature reads both. Lines and
    their numbers stay as they were; an all-ASCII text is returned as is, unread."""
    if text.isascii():
        return text
    firsts, index = _localized()
    candidates = [pair for ch in set(firsts.findall(text)) for pair in index[ch]]
    # longest first: 没有那个设备或地址 before 没有那个设备
    for loc, eng in sorted(candidates, key=lambda p: -len(p[0])):
        if loc in text:
            text = text.replace(loc, eng)
    return text


@dataclass(frozen=True)
class Line:
    number: int  # 1-based, in its file
    text: str  # normalised: no colours, no rank prefixes
    raw: str
    where: str  # "node1:3", "rank 3", "" when unknown
    source: str = ""  # the file it came from, in a run directory
    time: float | None = None  # seconds, comparable between lines of the same log format
    shown: str = ""  # the text as the log printed it, where `english` changed a phrase

    def order(self) -> tuple:
        """Where the line sits in the run: by its time where it has one, else by file and line."""
        return self.time is None, self.time or 0, self.source, self.number

    def before(self, other: "Line") -> bool:
        """Printed before `other`: by time where both have one, else only within one file."""
        if self.time is not None and other.time is not None:
            return self.time < other.time
        return self.source == other.source and self.number < other.number

    def display(self) -> str:
        """What to show a person: the line as printed (拒绝连接, not Connection refused)."""
        return self.shown or self.text

    def place(self) -> str:
        at = f"{self.source}:{self.number}" if self.source else f"line {self.number}"
        return f"{at} ({self.where})" if self.where else at


def timestamp(text: str) -> float | None:
    m = ISO.match(text)
    if m:
        y, mo, d, h, mi, s, frac = m.groups()
        try:
            day = datetime.date(int(y), int(mo), int(d)).toordinal()
        except ValueError:
            return None
        return day * 86400.0 + int(h) * 3600 + int(mi) * 60 + int(s) + float(f"0.{frac or 0}")
    m = GLOG.match(text)
    if m:  # no year in glog: good enough to order the lines of one run
        mo, d, h, mi, s, frac = m.groups()
        return ((int(mo) * 31 + int(d)) * 86400.0 + int(h) * 3600 + int(mi) * 60 + int(s)
                + float(f"0.{frac}"))
    return None


def _prefixes_for(text: str) -> tuple:
    """The prefix patterns that can match this line (by its first characters)."""
    head = text[:2]
    if head == "[r":
        return (TEE_RANK,)
    if head == "[d":
        return (TEE_DEFAULT,)
    if head == "[p":
        return (KUBECTL,)
    if head[:1] == "[":
        return (MPI_TAG,)
    if head == "(p" or (head[:1] == "(" and "pid=" in text[:60]):
        return RAY, SKYPILOT
    srun = (SRUN,) if head[:1].isdigit() else ()
    if " | " in text[:80]:
        return (LAUNCH, *srun, COMPOSE)
    return srun


def normalise(raw: str, number: int, source: str = "", where: str = "") -> Line:
    raw = raw.rstrip("\r\n")[:MAX_LINE]
    text = ANSI.sub("", raw) if ("\x1b" in raw or raw[:1] == "[") else raw
    found: dict[str, str] = {}
    stamp = None
    if text[:1].isdigit():  # a collector's stamp comes before any rank prefix
        text, stamp = _cut_stamp(text)
    # Every prefix starts with "[" or a digit, or holds " | " early: most lines have none.
    changed = bool(text) and (text[0] in "[(" or text[0].isdigit() or " | " in text[:80])
    while changed and text:
        changed = False
        for rx in _prefixes_for(text):
            m = rx.match(text)
            if m:
                for key, value in m.groupdict().items():
                    if value not in (None, "-"):
                        found.setdefault(key, value)
                text = text[m.end():]
                changed = True
                break
    label = where
    if "host" in found and "rank" in found:
        label = f"{found['host']}:{found['rank']}"
    elif "rank" in found:
        label = f"rank {found['rank']}"
    elif "local" in found:
        label = f"local rank {found['local']}"
    elif "pid" in found:
        label = f"{found['host']} pid {found['pid']}" if "host" in found else f"pid {found['pid']}"
    elif "host" in found:
        label = found["host"]
    if stamp is None and text[:1] in "[0123456789":
        text, stamp = _cut_stamp(text)  # Python logging's, after a rank prefix
    if stamp is None and text[:1] in "IWEF":
        stamp = timestamp(text)  # glog's stays in the text: routine() reads its level
    return Line(number, text, raw, label, source, stamp)


def _cut_stamp(text: str) -> tuple[str, float | None]:
    """An ISO stamp at the start of a line (a collector's or Python logging's) is where the line
    sits in time, not what it says: its time, and the text without it."""
    m = STAMPED.match(text)
    if m is None:
        return text, None
    return text[m.end():], timestamp(text)  # a stamp alone is a blank line of the log
