"""The scanner's cheap per-line tests must never reject a line a regex matches: every corpus
line (and every line of the message catalogue) is tried against every regex of the knowledge
base."""

import json

from ddpkit.troubleshoot.diagnose.kb import anchors, needles, signatures, tokens
from ddpkit.troubleshoot.diagnose.lines import normalise
from ddpkit.troubleshoot.diagnose.pyerrors import ROUTINE, routine
from ddpkit.troubleshoot.diagnose.scan import Scanner
from tests.diagnose_corpus import load_corpus, load_messages


def _passes(need, text: str) -> bool:
    subs, ci = need
    if ci and not text.isascii():
        return True
    hay = text.lower() if ci else text
    return any(s in hay for s in subs)


def test_needles_never_reject_a_matching_line():
    scan = Scanner(signatures())
    pairs = [(rx, needles(rx)) for rx in scan.regexes]
    assert sum(n is not None for _rx, n in pairs) > len(pairs) // 2
    texts = [normalise(raw, 1).text for case in load_corpus()
             if case.path.parent.name not in ("unseen4", "batch4")  # frozen test sets
             for raw in case.text.splitlines()]
    texts += [normalise(raw, 1).text for msg in load_messages() for raw in msg.line.splitlines()]
    words = {rx.pattern: anchors(rx) for rx, _need in pairs}
    for text in texts:
        assert (ROUTINE.search(text) is not None) == routine(text), text
        toks = None
        for rx, need in pairs:
            m = (need is not None or words[rx.pattern]) and rx.search(text)
            if m:
                assert need is None or _passes(need, text), (rx.pattern, text)
                # and the gate's words: one of them is a word of the line ("mpirun", not the
                # "run" the parser leaves in a group after taking out the shared "mpi"), where
                # the match is not glued to letters at its ends (the gate's stated assumption)
                glued = (m.start() and text[m.start() - 1].isalnum()) or (
                    m.end() < len(text) and text[m.end()].isalnum())
                if words[rx.pattern] and not glued:
                    toks = toks if toks is not None else set(tokens(text))
                    assert words[rx.pattern] & toks, (rx.pattern, words[rx.pattern], text)


def test_needles_of_simple_patterns():
    import re

    assert needles(re.compile(r"(?:failed|error) .*cudaIpcOpenMemHandle")) == (
        ("cudaIpcOpenMemHandle",), False)
    assert needles(re.compile(r"(?i)\b(?:Running evaluation|validation)\b")) == (
        ("running evaluation", "validation"), True)
    assert needles(re.compile(r"\d+ ms")) == ((" ms",), False)
    assert anchors(re.compile(r"\b(?:mpirun|mpiexec)\b -np")) == {"mpirun", "mpiexec"}
    assert anchors(re.compile(r"(?i)sync_?batch_?norm|syncbn")) is None or "batch" not in \
        anchors(re.compile(r"(?i)sync_?batch_?norm|syncbn"))
    assert needles(re.compile(r"\d+ s")) is None  # nothing of 3 characters or more


def _reference_lines(scan, text: str) -> set[int]:
    """The lines the gate read before it looked at distinct lines and at digits apart: those
    holding a gate word of the chunk, an anchor or a mark, and the first 60 lines."""
    from ddpkit.troubleshoot.diagnose.kb import TOKEN_TABLE
    from ddpkit.troubleshoot.diagnose.pyerrors import DIGITS_0
    from ddpkit.troubleshoot.diagnose.scan import MARK_PARTS, MARKS, _parts

    low = text.lower()
    tokens = set(low.translate(TOKEN_TABLE).split())
    words = scan.words & tokens
    pool = set(MARKS) | {w for w, key, _rxs in scan.extra if (key in tokens if key else w in low)}
    # the marks and anchors the chunk holds (their words inside the chunk's words)
    bag = "\n".join(set(low.translate(DIGITS_0).translate(TOKEN_TABLE).split()))
    readers = {m for m, parts in MARK_PARTS if all(p in bag for p in parts)}
    readers |= {w for w, key, _rxs in scan.extra
                if (key in tokens if key else all(p in bag for p in _parts(w)))}

    def wanted(word: str, raw: str) -> bool:
        """A line holding `word` is read unless every regex of the gate words holding it
        needs one hit only and none of their needles is in the line (and no mark or anchor
        holding it picks lines for other readers)."""
        if any(word in r for r in readers):
            return True
        rxs = {i for w in words if word in w for i in scan.by_word[w]}
        return any(not scan.once[i] for i in rxs) or any(
            needles(scan.regexes[i]) is None or _passes(needles(scan.regexes[i]), raw)
            for i in rxs)

    return {i for i, (line, raw) in enumerate(zip(low.split("\n"), text.split("\n")), 1)
            if i <= 60 or any(w in line for w in pool)
            or any(w in line and wanted(w, raw) for w in words)}


def test_the_chunk_test_reads_the_same_lines_as_tokenizing_it_all():
    import random

    from ddpkit.troubleshoot.diagnose.scan import Scanner

    rng = random.Random(12)
    words = sorted(Scanner(signatures()).words) + ["x", "é", "中", "0", "42", "\u00a0", "\u2003"]
    glue = [" ", "", "-", ".", ":", "_", "/", "\t", "9", "7x", "é"]
    for _ in range(40):
        scan = Scanner(signatures())
        read: list[int] = []
        scan.feed = lambda raw, number, *a, read=read: read.append(number)  # noqa: E731
        lines = ["".join(rng.choice(words) + rng.choice(glue) for _ in range(rng.randint(0, 6)))
                 for _ in range(400)]
        text = "\n".join(lines)
        scan.feed_text(text, 1)
        # the gate reads the chunk as the scanner prepared it (random rows of random lengths
        # can look word-wrapped)
        seen = Scanner(signatures()).prepare(text, 1)
        assert set(read) == _reference_lines(scan, seen)


def test_the_gate_reads_few_lines_of_a_healthy_nccl_log_one_by_one():
    """The speed of a 50 MB log comes from the gate: most noise lines are never read one by one.
    A signature whose pattern gates on a word of every NCCL WARN or INFO line (a regression
    seen once: 'NCCL WARN .*connect...' made a third of the lines slow; then telnet's `Connected
    to host.` read every `Connected all rings` line, and a py-spy frame's regex every DataLoader
    warning, 50 MB in 4-8 s) shows up here as a count, not as a timing: beyond the first lines
    and the failure, hardly any."""
    from benchmarks import diagnose_speed

    lines = diagnose_speed.build(1).decode().splitlines()
    scan = Scanner(signatures())
    read = []
    feed = scan.feed
    scan.feed = lambda raw, *a, **k: (read.append(raw), feed(raw, *a, **k))[1]
    scan.feed_all(lines)
    assert len(read) < 0.02 * len(lines), (len(read), len(lines))


def test_no_anchor_is_shorter_than_three_characters():
    """An anchor picks every line holding it in a chunk that has it as a word: "h" (of
    `mpirun -H`) made any log with `eta 2 h` in it read one line in three one by one."""
    short = sorted({(s.id, a) for s in signatures() for a in s.anchors if len(a.rstrip("*")) < 3})
    assert not short, short


def test_a_line_a_once_only_regex_matches_is_read_after_the_first_lines():
    """The gate skips a line picked only for regexes that need one hit when it holds none of
    their substrings: every such regex must still get its hit from a line of the corpus or the
    catalogue that it matches, placed after the first lines (which are read anyway) and before
    the regex had any hit, as the reference path (every line read) gets it."""
    from collections import defaultdict

    sigs = signatures()
    base = Scanner(sigs)
    texts = sorted({raw for case in load_corpus() for raw in case.text.splitlines() if raw.strip()}
                   | {raw for msg in load_messages() for raw in msg.line.splitlines() if raw.strip()})
    first: dict[int, str] = {}
    always = set(base.always)
    for raw in texts:
        text = normalise(raw, 1).text
        for i, rx in enumerate(base.regexes):
            # (regexes with gate words and substrings: the others are read as before)
            if base.once[i] and i not in first and i not in always and base.needles[i] \
                    and _passes(base.needles[i], text) and rx.search(text):
                first[i] = raw
    filler = [f"epoch 0 iter {k} loss 0.5" for k in range(65)]
    groups = defaultdict(list)
    for n, (i, raw) in enumerate(sorted(first.items())):
        groups[n // 150].append((i, raw))
    missed = []
    for group in groups.values():
        log = filler + [raw for _i, raw in group]
        gated, every = Scanner(sigs), Scanner(sigs, gate=False)
        gated.feed_all(log)
        every.feed_all(log)
        missed += [(base.regexes[i].pattern[:60], raw[:80]) for i, raw in group
                   if i in every.hits and i not in gated.hits]
    assert len(first) > 100
    assert not missed, missed


def test_the_gate_kept_between_runs_is_the_gate_worked_out(tmp_path, monkeypatch):
    """The gate's tables come from the user's cache after the first run (half a second less for
    every `ddpkit diagnose`): the same words and needles as working them out, a damaged file
    worked out again and rewritten, and a cache that cannot be written costs nothing but time."""
    from ddpkit.troubleshoot.diagnose import kb

    regexes = list(Scanner(signatures()).regexes)
    worked_out = [(needles(rx), anchors(rx)) for rx in regexes]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "ddpkit" / kb.GATE_CACHE

    def fresh_process():
        monkeypatch.setattr(kb, "_GATE", {})
        kb._stored_gate.cache_clear()
        return kb.gate_tables(regexes)

    assert fresh_process() == worked_out  # cold: worked out, and written
    assert len(json.loads(cache.read_text())) == 1 + len({kb._key(rx) for rx in regexes})
    monkeypatch.setattr(kb, "needles", None)  # warm: nothing is worked out again
    monkeypatch.setattr(kb, "anchors", None)
    assert fresh_process() == worked_out
    monkeypatch.undo()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache.write_text('{"0:broken": [1, 2, 3], ')  # damaged: worked out again, rewritten
    assert fresh_process() == worked_out and len(json.loads(cache.read_text())) > 1000
    stale = json.loads(cache.read_text())  # written by another version of the gate's code
    stale["_salt"], stale[kb._key(regexes[0])] = "another ddpkit", [None, ["nosuchword"]]
    cache.write_text(json.dumps(stale))
    assert fresh_process() == worked_out
    blocked = tmp_path / "blocked"  # a file where the cache folder should be: not writable
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    assert fresh_process() == worked_out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "ddpkit"]
