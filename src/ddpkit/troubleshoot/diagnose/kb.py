"""The knowledge base: load signatures*.toml once, check every entry, and give every regex the
words a line must contain before it is worth running (the scanner's cheap gate)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ddpkit.data import tomllib

try:  # the regex parser moved in 3.11; only used to find the literal words of a pattern
    import re._parser as sre_parse  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - Python < 3.11
    import sre_parse  # type: ignore[no-redef]

CATEGORIES = (
    "rendezvous_master_unreachable", "port_in_use_or_firewall", "nccl_interface_selection",
    "nccl_timeout_or_desync", "version_mismatch", "duplicate_gpu_or_wrong_device",
    "shared_memory_docker", "ssh_failure", "oom_cuda_error", "ddp_usage_error",
    "launcher_misuse", "horovod_specific", "p2p_acs_iommu",
)
# Answers that no signature gives: an exception in the user's own code, and "no known cause".
ALL_CATEGORIES = CATEGORIES + ("script_error", "unknown")
# cause: names the root cause; symptom: what a cause elsewhere leads to (watchdog timeouts);
# fact: circumstantial (a topology matrix, a test that stopped after its header);
# echo: says only that something failed (torchrun's summary): never a hypothesis of its own;
# hang: the shape of a run (one node or several, how its GPUs talk), weighed only when the run
# hung (signatures-hang.toml, hung.py).
KINDS = ("cause", "symptom", "fact", "echo", "hang")
# Words on most lines of a healthy NCCL_DEBUG=INFO / torchrun log: poor gates.
COMMON_WORDS = frozenset("""nccl info rank using with from the and for torch cuda device
process processgroupnccl connected environment variable complete init channel via comm ring
trees dataloader worker warning default node set setting function processes userwarning
create packages""".split())  # site-packages: in every frame of a traceback
# Wide punctuation (full-width forms, CJK symbols) separates words as ASCII punctuation does: a
# Chinese log writes "error：" and "（rank 1）"; any other non-ASCII character is part of a word.
WIDE_PUNCT = frozenset(c for c in map(chr, [*range(0x3000, 0x3020), *range(0xFF01, 0xFF10),
                                            *range(0xFF1A, 0xFF21), *range(0xFF3B, 0xFF41),
                                            *range(0xFF5B, 0xFF66), 0x2018, 0x2019, 0x201C,
                                            0x201D, 0x2026, 0x2014, 0x2013, 0x2022, 0x00B7,
                                            0xFE0F,
                                            # arrows, box drawing (rich's tracebacks), shapes,
                                            # dingbats, emoji ("⭐Error message:", "❌ failed")
                                            *range(0x2190, 0x2200), *range(0x2500, 0x27C0),
                                            *range(0x2B00, 0x2C00), *range(0x1F300, 0x1FB00)])
                       if not c.isalnum())  # (U+3005 and U+3007 are letters)
TOKEN_TABLE = str.maketrans({c: " " for c in [*map(chr, range(128)), *WIDE_PUNCT]
                             if not c.isalnum()})


@dataclass(frozen=True)
class Signature:
    id: str
    category: str
    title: str
    kind: str
    weight: float  # how sure this evidence alone makes the category the root cause (0..1)
    patterns: tuple[re.Pattern, ...]
    requires: tuple[re.Pattern, ...]
    excludes: tuple[re.Pattern, ...]
    evidence: tuple[re.Pattern, ...]
    explanation: str
    fix: str
    source: str
    # For the scanner's gate where a regex has no literal word of its own (lower case): words,
    # phrases, or word prefixes ending in "*" ("veth*" finds "veth6163fba").
    anchors: tuple[str, ...] = ()
    # A named group of the patterns that must take at least two different values in the log
    # (two NCCL versions on one machine): evidence that no single line holds.
    differ: str = ""
    # A named group that must take one value on two lines or more, with fewer than 8 values in
    # all (two processes both announcing GLOBAL_RANK 1): evidence that no single line holds.
    repeat: str = ""
    # A cause where it comes first, an echo where another cause came before it: what the other
    # nodes print once a rank failed (the C10d store gone with the node that hosted it, a Gloo
    # peer that closed its socket when it died).
    echo_after: bool = False


class KnowledgeBaseError(ValueError):
    pass


def parse(data: dict) -> tuple[Signature, ...]:
    out, seen = [], set()
    for raw in data.get("signature", []):
        sid = raw.get("id", "?")
        if sid in seen:
            raise KnowledgeBaseError(f"duplicate signature id {sid}")
        seen.add(sid)
        if raw.get("category") not in CATEGORIES:
            raise KnowledgeBaseError(f"{sid}: unknown category {raw.get('category')}")
        if raw.get("kind") not in KINDS:
            raise KnowledgeBaseError(f"{sid}: kind must be one of {', '.join(KINDS)}")
        for key in ("title", "explanation", "fix", "source", "patterns"):
            if not raw.get(key):
                raise KnowledgeBaseError(f"{sid}: missing {key}")
        try:
            compiled = {k: tuple(re.compile(p) for p in raw.get(k, []))
                        for k in ("patterns", "requires", "excludes", "evidence")}
        except re.error as exc:
            raise KnowledgeBaseError(f"{sid}: bad regex: {exc}") from None
        out.append(Signature(id=sid, category=raw["category"], title=raw["title"],
                             kind=raw["kind"], weight=float(raw.get("weight", 0.5)),
                             explanation=raw["explanation"], fix=raw["fix"],
                             source=raw["source"],
                             anchors=tuple(w.lower() for w in raw.get("anchors", [])),
                             differ=raw.get("differ", ""), repeat=raw.get("repeat", ""),
                             echo_after=bool(raw.get("echo_after", False)),
                             **compiled))
        for field_ in ("differ", "repeat"):
            group = getattr(out[-1], field_)
            if group and not any(group in rx.groupindex for rx in out[-1].patterns):
                raise KnowledgeBaseError(f"{sid}: {field_} names no group of its patterns")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def signatures() -> tuple[Signature, ...]:
    """signatures.toml, then signatures-<family>.toml in name order (one file per source of
    messages: Open MPI, NCCL, the launchers...); ids are unique across all of them."""
    files = sorted((f for f in resources.files(__package__).iterdir()
                    if f.name.startswith("signatures") and f.name.endswith(".toml")),
                   key=lambda f: (f.name != "signatures.toml", f.name))
    entries = [raw for f in files
               for raw in tomllib.loads(f.read_text(encoding="utf-8")).get("signature", [])]
    return parse({"signature": entries})


@dataclass(frozen=True)
class HangCause:
    """A cause of hangs (signatures-hang.toml): its prior, and the hang facts of other
    categories that make it likelier (w > 0) or less likely (w < 0: a factor 1 + w)."""
    category: str
    prior: float
    title: str
    explanation: str
    fix: str
    source: str
    with_: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class StackCause:
    """What the stacks a launch took during a hang say (signatures-hang.toml): `when` they show
    a rendezvous that never completed, a straggler, or every rank in its own code."""
    when: str
    id: str
    category: str
    confidence: float
    title: str  # with {detail}: the rendezvous, the verdict, or the place
    explanation: str
    fix: str
    source: str


STACK_CASES = ("rendezvous", "stragglers", "own-code")
TEXTS = ("title", "explanation", "fix", "source")


def _checked(kind: str, raw: dict, numbers: tuple[str, ...],
             categories: tuple[str, ...] = CATEGORIES) -> str:
    """The entry's category; KnowledgeBaseError for a missing text or a number outside [0, 1)."""
    cat = raw.get("category")
    if cat not in categories:
        raise KnowledgeBaseError(f"{kind} {cat}: unknown category")
    missing = [k for k in TEXTS + numbers if k not in raw or raw[k] in ("", None)]
    if missing:
        raise KnowledgeBaseError(f"{kind} {cat}: missing {', '.join(missing)}")
    for k in numbers:
        if not isinstance(raw[k], (int, float)) or not 0 <= raw[k] < 1:
            raise KnowledgeBaseError(f"{kind} {cat}: {k} must be a number in [0, 1)")
    return cat


def parse_hang_causes(raws: list, ids: set[str]) -> tuple[HangCause, ...]:
    out = []
    for raw in raws:
        cat = _checked("hang_cause", raw, ("prior",))
        with_ = raw.get("with", {})
        unknown = set(with_) - ids
        if unknown:
            raise KnowledgeBaseError(f"hang_cause {cat}: no signature {sorted(unknown)}")
        if any(not isinstance(w, (int, float)) or not -1 < w < 1 for w in with_.values()):
            raise KnowledgeBaseError(f"hang_cause {cat}: a `with` weight must be in (-1, 1)")
        out.append(HangCause(cat, float(raw["prior"]), raw["title"], raw["explanation"],
                             raw["fix"], raw["source"],
                             tuple((k, float(w)) for k, w in with_.items())))
    return tuple(out)


def parse_stack_causes(raws: list) -> tuple[StackCause, ...]:
    out = []
    for raw in raws:
        cat = _checked("stack_cause", raw, ("confidence",), ALL_CATEGORIES)
        if raw.get("when") not in STACK_CASES or not raw.get("id"):
            raise KnowledgeBaseError(f"stack_cause {cat}: `when` must be one of "
                                     f"{', '.join(STACK_CASES)}, with an id")
        out.append(StackCause(raw["when"], raw["id"], cat, float(raw["confidence"]),
                              *(raw[k] for k in TEXTS)))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def _hang_data() -> dict:
    f = resources.files(__package__) / "signatures-hang.toml"
    return tomllib.loads(f.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def hang_causes() -> tuple[HangCause, ...]:
    return parse_hang_causes(_hang_data().get("hang_cause", []),
                             {s.id for s in signatures() if s.kind == "hang"})


@functools.lru_cache(maxsize=None)
def stack_causes() -> tuple[StackCause, ...]:
    return parse_stack_causes(_hang_data().get("stack_cause", []))


def hang_settings() -> dict:
    return dict(_hang_data().get("stacks", {}))


# ---- anchors: a word every matching line contains -------------------------------------------
def tokens(text: str) -> list[str]:
    """The words of a line as the gate sees them: letters and digits, lower case, cut at white
    space and at ASCII and wide punctuation."""
    return text.translate(TOKEN_TABLE).lower().split()


def _runs(items) -> list[str | None]:
    """The literal characters of a parsed regex sequence; ' ' marks a place that matches only
    non-word characters (a word boundary), None a place that may match letters."""
    runs: list[str | None] = [" "]
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            runs.append(chr(av))
        elif name == "AT" or (name == "IN" and "CATEGORY_SPACE" in str(av)):
            runs.append(" ")
        elif name in ("MAX_REPEAT", "MIN_REPEAT") and av[0] >= 1 and len(av[2]) == 1 and (
                "CATEGORY_SPACE" in str(av[2]) or (str(av[2][0][0]) == "LITERAL"
                                                   and not chr(av[2][0][1]).isalnum())):
            runs.append(" ")  # (an optional one, `_?`, may glue its neighbours: not a boundary)
        elif name == "SUBPATTERN" and len(av[-1]) and str(av[-1][0][0]) != "BRANCH":
            runs.extend(_runs(av[-1])[1:-1])
        else:
            runs.append(None)
    # A pattern's own ends count as word boundaries: log words are not glued to letters, and
    # tests/unit/test_diagnose.py checks that the gate never changes an answer on the corpus.
    runs.append(" ")
    return runs


def _words(seq: list[str | None]) -> set[str]:
    """Words that are whole in the line whenever the sequence matches: both ends known."""
    out, current, start_known = set(), "", True
    for ch in seq:
        if ch is not None and ch.isascii() and ch.isalnum():
            current += ch
            continue
        if current and start_known and ch is not None and len(current) >= 3:
            out.add(current.lower())
        current, start_known = "", ch is not None
    return out


def _branches(items) -> list:
    """The first group of alternatives, each put back in its place in the sequence: the parser
    takes a prefix the alternatives share out of the group ("mpi" of mpirun|mpiexec), so an
    alternative alone ("run") is not a word of the line; in its place it is ("mpirun")."""
    for i, (op, av) in enumerate(items):
        if str(op) == "BRANCH":
            alts = av[1]
        elif str(op) == "SUBPATTERN" and len(av[-1]) == 1 and str(av[-1][0][0]) == "BRANCH":
            alts = av[-1][0][1][1]
        else:
            continue
        return [list(items[:i]) + list(alt) + list(items[i + 1:]) for alt in alts]
    return []


def _anchor(items) -> frozenset[str] | None:
    words = _words(_runs(items))
    # ties broken by the word itself: a set's order changes with the hash seed, and so did the
    # gate (one seed picked "create", on every line of DataLoader's worker warning)
    best = max(words, key=lambda w: (w not in COMMON_WORDS, len(w), w)) if words else None
    if best is not None and best not in COMMON_WORDS:  # the longest word rare in healthy logs
        return frozenset([best])
    alternatives = _branches(items)  # else one rarer word per alternative of a group
    found = [_anchor(alt) for alt in alternatives]
    if found and all(a is not None for a in found):
        union = frozenset().union(*found)
        if best is None or not union & COMMON_WORDS:
            return union
    return frozenset([best]) if best is not None else None


@functools.lru_cache(maxsize=None)
def anchors(rx: re.Pattern) -> frozenset[str] | None:
    """Words, one per alternative, one of which a line matching rx must contain; None when some
    alternative has none (then the regex runs on every line)."""
    return _anchor(list(_parsed(rx)))


@functools.lru_cache(maxsize=None)
def _parsed(rx: re.Pattern):
    return sre_parse.parse(rx.pattern, rx.flags)


# ---- needles: substrings one of which every match contains (the scanner's per-line test) ----
REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _flat(items):
    """The ops of a sequence, with plain groups (matched exactly once, no flag change) opened."""
    for op, av in items:
        if str(op) == "SUBPATTERN" and not av[1] and not av[2]:
            yield from _flat(av[-1])
        else:
            yield op, av


def _score(need: tuple[str, ...]) -> tuple[int, int]:
    return min(len(s) for s in need), -len(need)


def _need(items) -> tuple[str, ...] | None:
    """Literal substrings, one of which is in every text the sequence matches; None if unknown."""
    cands: list[tuple[str, ...]] = []
    run = ""
    for op, av in _flat(items):
        name = str(op)
        if name == "LITERAL":
            run += chr(av)
            continue
        if name == "AT":  # zero-width: the literals on both sides are adjacent in the text
            continue
        if run:
            cands.append((run,))
        run = ""
        if name == "BRANCH":
            alts = [_need(alt) for alt in av[1]]
            if alts and all(alts):
                cands.append(tuple(sorted({s for a in alts for s in a})))
        elif name in REPEATS and av[0] >= 1:
            inner = _need(av[2])
            if inner:
                cands.append(inner)
    if run:
        cands.append((run,))
    return max(cands, key=_score) if cands else None


# ---- the gate's tables, kept between runs ----
# Working out each regex's words and needles parses all ~2600 patterns again: half a second
# of every `ddpkit diagnose`, however short the log. Both depend on the pattern text alone, so
# they are kept in the user's cache ($XDG_CACHE_HOME/ddpkit, ~/.cache/ddpkit) under the pattern
# itself: a pattern changed or added is worked out anew, and the file holds only the patterns of
# the last run. An unreadable or unwritable cache costs the half second, nothing else.
GATE_CACHE = "diagnose-gate-v1.json"


def gate_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddpkit" / GATE_CACHE


def _key(rx: re.Pattern) -> str:
    return f"{rx.flags}:{rx.pattern}"


@functools.lru_cache(maxsize=None)
def _salt() -> str:
    """What else the tables depend on: this module's code (the parsing, COMMON_WORDS). A cache
    written by another version of it is not read."""
    try:
        code = Path(__file__).read_bytes()
    except OSError:
        code = repr(sorted(COMMON_WORDS)).encode()
    return hashlib.sha1(code + sys.version.encode()).hexdigest()


_GATE: dict[str, tuple] = {}  # this process's tables, by _key


@functools.lru_cache(maxsize=None)
def _stored_gate() -> dict[str, tuple]:
    """The cache file's tables (read once per process); {} when absent, damaged or stale."""
    try:
        stored = json.loads(gate_cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict) or stored.pop("_salt", None) != _salt():
        return {}
    out = {}
    for key, row in stored.items():
        try:
            need, words = row
            out[key] = (None if need is None else (tuple(need[0]), bool(need[1])),
                        None if words is None else frozenset(words))
        except (TypeError, ValueError, IndexError):
            continue  # a damaged entry is worked out again
    return out


def gate_tables(regexes: list[re.Pattern]) -> list[tuple[object, frozenset[str] | None]]:
    """(needles(rx), anchors(rx)) of each regex, from the cache where it has them."""
    missing = [rx for rx in regexes if _key(rx) not in _GATE]
    if missing:
        stored = _stored_gate()
        for rx in missing:
            _GATE[_key(rx)] = stored.get(_key(rx)) or (needles(rx), anchors(rx))
        if any(_key(rx) not in stored for rx in missing):
            _save_gate({_key(rx): _GATE[_key(rx)] for rx in regexes})
    return [_GATE[_key(rx)] for rx in regexes]


def _save_gate(tables: dict[str, tuple]) -> None:
    rows: dict[str, object] = {"_salt": _salt()}
    rows.update({key: [None if need is None else [list(need[0]), need[1]],
                       None if words is None else sorted(words)]
                 for key, (need, words) in tables.items()})
    path = gate_cache_path()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(rows), encoding="utf-8")
        os.replace(tmp, path)  # whole or not at all: another diagnose may read it now
    except OSError:
        try:
            tmp.unlink()
        except OSError:  # never made (no folder, a file in its place)
            pass


@functools.lru_cache(maxsize=None)
def needles(rx: re.Pattern) -> tuple[tuple[str, ...], bool] | None:
    """(substrings, case_insensitive): a text rx matches holds one of the substrings (lower
    case, and tested on the lower-cased text of an ASCII line, when rx ignores case). A test
    cheaper than the search that never changes its answer; None when no useful one is known."""
    parsed = _parsed(rx)
    need = _need(list(parsed))
    if not need or _score(need)[0] < 3:
        return None
    ci = bool(parsed.state.flags & re.IGNORECASE)
    if ci:
        if not all(s.isascii() for s in need):
            return None
        need = tuple(sorted({s.lower() for s in need}))
    return need, ci
