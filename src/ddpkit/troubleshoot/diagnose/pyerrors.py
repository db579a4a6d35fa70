"""Python exceptions in a log, per rank, and the lines that decide a diagnosis when no signature
does: each rank's first error, the last lines before a silence, the command that was run."""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from ddpkit.data import load_toml
from ddpkit.troubleshoot.diagnose.lines import Line


def _wording() -> dict[str, list[str]]:
    """data/log_wording.toml, checked: an empty entry would match every line, and the words are
    tested on the lower-cased line (so they are lower-cased here)."""
    raw = load_toml("log_wording.toml")
    out = {}
    for key in ("distributed", "routine_words", "routine_lower"):
        entries = raw.get(key)
        if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
            raise ValueError(f"data/log_wording.toml: '{key}' must be a list of non-empty strings")
        out[key] = [e.lower() for e in entries] if key == "routine_words" else entries
    return out


_WORDING = _wording()

# A frame of a Python traceback, also as faulthandler ("File "x", line 3 in f") and some stack
# printers ("File: "x", line 3, in f") write it.
FRAME = re.compile(r'\s*File:? "(?P<path>[^"]+)", line (?P<line>\d+)(?:,? in (?P<func>\S+))?')
EXCEPTION = re.compile(
    r"(?P<type>(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt)"
    r"|KeyError|StopIteration|AssertionError))(?::\s?(?P<msg>.*))?$")
# Paths of library code: an exception raised there is not "the user's line".
LIBRARY = re.compile(r"site-packages|dist-packages|/lib/python\d|/torch/|<frozen|^<")
# Messages that belong to a distributed failure (an echo or a cause with its own signature);
# their words, each with why it is there, are data/log_wording.toml's.
DISTRIBUTED = re.compile("(?i)" + "|".join(_WORDING["distributed"]))
# The interpreter's own messages when what it was told to run is not there (no traceback, exit
# code 2): (a substring every such line holds, its regex, the exception it stands for).
MISSING_TARGET = (
    ("can't open file", re.compile(r"(?:^|[\s/])python[\d.]*: (?P<message>can't open file "
                                   r"'?[^']+?'?: )\[Errno \d+\] (?P<reason>.+)$"),
     "FileNotFoundError"),
    (": No module named ", re.compile(r"(?:^|[\s/])python[\d.]*: (?P<message>No module named "
                                      r"[\w.]+)\s*$"), "ModuleNotFoundError"),
)
MISSING_MODULE = re.compile(r"\s*No module named '(?P<top>[\w]+)(?:\.[\w.]+)?'\s*$")
NOT_SCRIPT = {"ChildFailedError", "DistBackendError", "DistStoreError", "DistNetworkError",
              "DistError", "ProcessRaisedException", "ProcessExitedException", "SignalException",
              "KeyboardInterrupt", "SystemExit", "RendezvousClosedError", "CalledProcessError",
              "BrokenPipeError", "ConnectionResetError", "ConnectionRefusedError", "TimeoutError"}
PLAIN_TYPES = {"KeyError", "ModuleNotFoundError", "ImportError", "SyntaxError", "NameError",
               "AttributeError", "TypeError", "ValueError", "IndexError", "FileNotFoundError",
               "AssertionError", "ZeroDivisionError", "IndentationError", "UnboundLocalError",
               "NotImplementedError", "RecursionError", "UnicodeDecodeError", "JSONDecodeError",
               "PermissionError", "IsADirectoryError", "StopIteration", "OverflowError"}
# A process killed by a signal prints no error word; the native crashes among them (not SIGKILL,
# the OOM killer's) have no Python traceback either (matcher.py's next check for them).
CRASH_WORDS = r"segmentation fault|core dumped|illegal instruction|\bSIG(?:SEGV|BUS|ABRT|ILL)\b"
CRASH = re.compile(r"(?i)" + CRASH_WORDS + r"|exitcode\s*:\s*-(?:4|6|7|11)\b")
# (Each alternative holds one of the scanner's MARKS, so the lines it reads include them all.)
ERRORISH = re.compile(
    r"Traceback|\b[A-Z]\w*(?:Error|Exception)\b|(?i:\berror\b|\bfailed\b|\bfatal\b|\bkilled\b|"
    r"\baborted\b|permission denied|connection refused|timed out|out of memory|undefined symbol|"
    r"\btimeout\b(?!['\"]?\s*[=:]\s*['\"]?\d|\s*=|\()|exit(?:ed)?(?: with)?(?: status| code):? ?-?[1-9]|"
    r"exitcode\s*:\s*-?[1-9]|\bSIGKILL\b|" + CRASH_WORDS + ")")
# Lines that show an error word yet are routine: glog info/warning lines, Python warnings,
# deprecations, NCCL's INFO chatter, summaries that count zero errors, nccl-tests' table header,
# a health check that found no error, a metrics logger's retries. On an ASCII line the test is
# a few substring tests (ROUTINE_WORDS, lower case) and two small regexes; ROUTINE, all of them
# in one regex, reads the other lines (its case-insensitive alternatives try every one at each
# character: 1.7 ms on a 4000-character line). The words are data: data/log_wording.toml.
ROUTINE_WORDS = tuple(_WORDING["routine_words"])
# (NCCL's errors end "(run with NCCL_DEBUG=INFO for details)": that INFO is no level)
ROUTINE_CASED = re.compile(r"^\[?[IW]\d{4} |NCCL INFO|\bINFO\b(?! for details)")
ROUTINE_LOWER = re.compile("|".join(_WORDING["routine_lower"]))
ROUTINE = re.compile(ROUTINE_CASED.pattern + "|(?i:" + "|".join(map(re.escape, ROUTINE_WORDS))
                     + "|" + ROUTINE_LOWER.pattern + ")")

def routine(text: str) -> bool:
    """ROUTINE.search(text), as a truth value."""
    if not text.isascii():
        return ROUTINE.search(text) is not None
    low = text.lower()
    return (any(w in low for w in ROUTINE_WORDS) or ROUTINE_CASED.search(text) is not None
            or ROUTINE_LOWER.search(low) is not None)
COMMAND = re.compile(
    r"(?:[$#>] |\+ )?(?:\w+=\S* )*(?:\S*/)?(?:torchrun|python[\d.]* -m torch\.distributed\.(?:run|launch)"
    r"|ddpkit (?:launch|demo|bench)(?!:)|mpirun|mpiexec|horovodrun|deepspeed|accelerate launch|srun|"
    r"python[\d.]* \S+\.py|bash \S+\.sh|sh \S+\.sh)\b")
COMMAND_WORDS = ("torchrun", "python", "ddpkit", "mpirun", "mpiexec", "horovodrun", "deepspeed",
                 "accelerate", "srun", "bash", "sh ")
ERROR_GATE = re.compile("error|traceback|fail|fatal|exception|killed|abort|denied|refused|exit|"
                        "timed out|timeout|out of memory|undefined symbol|segmentation fault|"
                        "core dumped|illegal instruction|sigsegv|sigbus|sigabrt|sigill|sigkill")


def failing(text: str) -> bool:
    """An error line: an error word, and not a warning or a routine line that holds one."""
    return ERRORISH.search(text) is not None and not routine(text)


TRACEBACK = "Traceback (most recent call last)"
DIGITS_0 = str.maketrans("123456789", "000000000")


@dataclass
class PyException:
    line: Line
    type: str
    message: str
    frames: list[tuple[str, int, str]] = field(default_factory=list)  # path, line, function
    missing_target: bool = False  # the script or module given to python does not exist
    # the numbers of the lines its message is printed on: its own, and where its line holds
    # none ("AssertionError:"), the next lines of its source (torch's driver check)
    lines: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lines = self.lines or [self.line.number]

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    def user_frame(self) -> tuple[str, int, str] | None:
        """The deepest frame in the user's own code (not a library)."""
        return next((f for f in reversed(self.frames) if not LIBRARY.search(f[0])), None)

    def is_plain(self) -> bool:
        """A Python error of the script itself, not a distributed failure or its echo."""
        if self.short_type in NOT_SCRIPT or self.short_type.startswith("Dist"):
            return False
        if self.frames and "/horovod/" in self.frames[-1][0] and LIBRARY.search(self.frames[-1][0]):
            # raised inside Horovod's own code (its frames are a fact of their own); a user's
            # script in a folder named horovod is still the script
            return False
        message = self.message
        missing = MISSING_MODULE.match(message)
        if missing and missing["top"] != "torch":  # 'transformers.deepspeed' is a module of
            message = missing["top"]  # transformers, not deepspeed; torch's own stay distributed
        return not DISTRIBUTED.search(message) and not DISTRIBUTED.search(self.type)

    def at(self) -> str:
        frame = self.user_frame() or (self.frames[-1] if self.frames else None)
        if frame is None:
            return ""
        return f"{frame[0].rsplit('/', 1)[-1]}:{frame[1]}"

    def who(self) -> str:
        """'rank 1 (node0)' from 'node0:1', 'rank 1' from 'rank 1'."""
        host, _, rank = self.line.where.rpartition(":")
        if host and rank.isdigit():
            return f"rank {rank} ({host})"
        return self.line.where or "a process"

    def rank(self) -> str:
        m = re.search(r"(\d+)$", self.line.where)
        return m.group(1) if m else ""

    def describe(self) -> str:
        msg = f": {self.message.strip()}" if self.message.strip() else ""
        return f"{self.short_type}{msg}"[:240]


class Tracebacks:
    """Follows tracebacks per source (rank) as lines stream in; keeps every exception seen."""

    def __init__(self, limit: int = 400) -> None:
        self.frames: dict[str, list[tuple[str, int, str]]] = {}
        self.exceptions: list[PyException] = []
        self.saw_frames = False
        self.limit = limit
        # Sources between "Exception ignored in: ..." and that exception's line: Python printed
        # it from a __del__ or an atexit hook and went on; the process did not die of it.
        self.ignored: set[str] = set()
        # Source -> what stood before its "Traceback" ("[2024-05-01 10:00:01,123] ", a stamp
        # some tool put on every line), its digits written 0: cut from the traceback's lines.
        self.gutter: dict[str, str] = {}
        # Source -> an exception whose message did not start on its own line: the next lines
        # of that source (2 at most, each right after the last) are its message.
        self.unsaid: dict[str, PyException] = {}

    def feed(self, line: Line) -> None:
        text = line.text
        key = line.source + "|" + line.where
        exc = self.unsaid.pop(key, None)
        if exc is not None and line.number == exc.lines[-1] + 1 and text.strip() \
                and not text.startswith(TRACEBACK) and not FRAME.match(text) \
                and not EXCEPTION.match(text):
            exc.message = f"{exc.message} {text.strip()}".strip()
            exc.lines.append(line.number)
            if len(exc.lines) < 3:
                self.unsaid[key] = exc
            return
        gutter = self.gutter.get(key)
        if gutter and text[:len(gutter)].translate(DIGITS_0) == gutter:
            text = text[len(gutter):]
        at = text.find(TRACEBACK, 1, 90) if "Traceback" in text[:120] else -1
        if at > 0 and text[at - 1] in " \t|]>:-" and "traceback" not in text[:at].lower():
            self.gutter[key] = text[:at].translate(DIGITS_0)
            self.frames[key] = []
            return
        if text.startswith("Exception ignored in"):
            self.ignored.add(key)
            return
        if text.startswith(TRACEBACK):
            self.frames[key] = []
            return
        stack = self.frames.get(key)
        if "File \"" in text:
            m = FRAME.match(text)
            if m:  # a SyntaxError shows its frame without a "Traceback" line
                self.saw_frames = self.saw_frames or key not in self.ignored
                if stack is None:
                    stack = self.frames[key] = []
                stack.append((m["path"], int(m["line"]), m["func"] or ""))
                return
        if text[:1].isspace() or not text:
            return
        for marker, rx, kind in MISSING_TARGET:
            found = rx.search(text) if marker in text else None
            if found:
                if len(self.exceptions) < self.limit:
                    message = found["message"] + found.groupdict().get("reason", "")
                    self.exceptions.append(PyException(line, kind, message.strip(),
                                                       missing_target=True))
                return
        m = EXCEPTION.match(text) if ("Error" in text or "Exception" in text
                                      or "Exit" in text or "Interrupt" in text
                                      or "StopIteration" in text) else None
        if m and key in self.ignored:  # the ignored traceback's exception: not a failure
            self.ignored.discard(key)
            self.frames.pop(key, None)
            return
        if m and len(self.exceptions) < self.limit:
            self.exceptions.append(PyException(line, m["type"], m["msg"] or "",
                                               list(stack or [])))
            if not (m["msg"] or "").strip():
                self.unsaid[key] = self.exceptions[-1]
        if stack is not None and m:
            self.frames.pop(key, None)
            self.gutter.pop(key, None)


class Decisive:
    """Each source's first error line, its last lines, and the command lines."""

    def __init__(self, tail: int = 3) -> None:
        self.first_error: dict[str, Line] = {}
        self.tails: dict[str, deque[Line]] = {}
        self.commands: list[Line] = []
        self.errors = 0
        self.tail = tail

    def feed(self, line: Line, low: str) -> None:
        key = line.where or line.source
        text = line.text.lstrip()
        # The command is looked for among the first lines of each source only (the scanner
        # reads those one by one; later lines only when they hold an error word).
        if len(self.commands) < 3 and line.number <= 60 and len(text) < 600 and (
                text.startswith(COMMAND_WORDS + ("$", "#", ">", "+")) or "=" in text[:60]):
            if COMMAND.match(text):
                self.commands.append(line)
        if ERROR_GATE.search(low) and failing(line.text):
            self.errors += 1
            self.first_error.setdefault(key, line)

    def set_tails(self, lines: list[Line]) -> None:
        """The last lines of the log, in order: each source keeps its last `tail`."""
        for line in lines:
            if not line.text.strip():
                continue
            key = line.where or line.source
            q = self.tails.get(key)
            if q is None:
                if len(self.tails) >= 256:
                    continue
                q = self.tails[key] = deque(maxlen=self.tail)
            q.append(line)

    def lines(self, limit: int = 12) -> list[dict]:
        """What a person should read first, in order: commands, first errors, the last lines."""
        out: list[dict] = []
        seen: set[tuple[str, int]] = set()

        def add(line: Line, why: str) -> None:
            if (line.source, line.number) in seen or len(out) >= limit:
                return
            seen.add((line.source, line.number))
            out.append({"line": line.number, "where": line.where, "source": line.source,
                        "text": line.display().strip()[:300], "why": why})

        for ln in self.commands[:2]:
            add(ln, "command")
        firsts = sorted(self.first_error.values(), key=Line.order)
        for ln in firsts[:6]:
            add(ln, "first error" + (f" of {ln.where}" if ln.where else ""))
        for key, q in list(self.tails.items())[:4]:
            for ln in q:
                add(ln, "last lines" + (f" of {key}" if key else ""))
        return out
