"""A statistical guess where no rule fires: a linear model over the words and stack-frame names
of a log's first lines, error lines and last lines, learnt from the corpus's "train" split
(scripts/train_diagnose_fallback.py writes src/ddpkit/data/diagnose_fallback.json).

The model is naive Bayes over the presence of features (words of 3+ letters, `x:` exception
types, `f:` traceback function names): each category's score is a sum of per-feature weights, so
the features that pushed a guess up, and the lines holding them, can always be shown. Scores
become probabilities with a temperature, and confidences come from leave-one-repository-out
accuracy over train, capped below the rule findings. Pure Python: no numpy.

Off unless ENABLED: benchmarks/diagnose_eval.py measures whether it helps (see README)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import Counter, defaultdict
from importlib import resources
from typing import Iterable

from ddpkit.troubleshoot.diagnose.kb import CATEGORIES, TOKEN_TABLE, signatures
from ddpkit.troubleshoot.diagnose.lines import Line, normalise
from ddpkit.troubleshoot.diagnose.scan import Scanner

# Shipped off: where no rule fired, its top guess was right for 0 of 3 train logs (leave one
# repository out; 6 of 20 while new train logs lacked their rules) and for 0 of the 2 such
# held-out logs, and a wrong guess would come before `unknown` (benchmarks/diagnose_eval.py
# prints the figures; README says more).
ENABLED = False
MODEL = "diagnose_fallback.json"
CAP = 0.3  # a guess never claims more than this (rule findings that name a cause claim more)
ABSTAIN = 0.4  # below this probability of its top category the model says nothing
MIN_FEATURES = 3  # known features a log must show before the model guesses
TAIL_SOURCES = 32
STOP = frozenset("""the and for with from that this was not are has have but you your all can
into out will than then when what which while were been being its our their there these those
line file none true false self args kwargs return call main""".split())
ALPHA = 0.5
MIN_DF = 2
TEMPERATURES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
BINS = (0.0, 0.4, 0.6, 0.8)


def _tokens(text: str) -> Iterable[str]:
    for tok in text.lower().translate(TOKEN_TABLE).split():
        if 3 <= len(tok) <= 40 and tok[0].isalpha() and tok not in STOP \
                and sum(ch.isdigit() for ch in tok) <= 2:
            yield tok


def features(scan: Scanner) -> dict[str, Line]:
    """feature -> the first line that holds it."""
    lines = list(scan.model_lines)
    for q in list(scan.tail_raw.values())[:TAIL_SOURCES]:
        lines += [normalise(raw, number, source, where) for number, raw, source, where in q]
    out: dict[str, Line] = {}
    for line in lines:
        for tok in _tokens(line.text):
            out.setdefault("w:" + tok, line)
    for exc in scan.tracebacks.exceptions[:50]:
        out.setdefault("x:" + exc.short_type, exc.line)
        for _path, _number, func in exc.frames:
            if func and not func.startswith("<"):
                out.setdefault("f:" + func, exc.line)
    return out


def log_features(raw_lines: Iterable[str]) -> dict[str, Line]:
    scan = Scanner(signatures())
    scan.feed_all(raw_lines)
    return features(scan)


# ---- training (scripts/train_diagnose_fallback.py, and the leave-one-out measurement) --------
def fit(docs: list[tuple[str, frozenset[str]]]) -> dict:
    """Naive Bayes weights (log probabilities, uniform prior) from (category, features)."""
    df = Counter(f for _cat, feats in docs for f in feats)
    vocab = sorted(f for f, n in df.items() if n >= MIN_DF)
    known = set(vocab)
    counts: dict[str, Counter] = defaultdict(Counter)
    for cat, feats in docs:
        counts[cat].update(f for f in feats if f in known)
    cats = [c for c in CATEGORIES if c in counts]
    default, weights = {}, defaultdict(dict)
    for cat in cats:
        total = sum(counts[cat].values()) + ALPHA * len(vocab)
        default[cat] = math.log(ALPHA / total)
        for f, n in counts[cat].items():
            weights[f][cat] = math.log((n + ALPHA) / total)
    return {"categories": cats, "default": default, "weights": dict(weights), "temperature": 1.0}


def scores(model: dict, feats: Iterable[str]) -> dict[str, float]:
    weights, default = model["weights"], model["default"]
    out = dict.fromkeys(model["categories"], 0.0)
    for f in feats:
        w = weights.get(f)
        if w is None:
            continue
        for cat in out:
            out[cat] += w.get(cat, default[cat])
    return out


def probabilities(model: dict, feats: Iterable[str]) -> list[tuple[str, float]]:
    """(category, probability), most likely first."""
    sc = scores(model, feats)
    top = max(sc.values())
    t = model["temperature"]
    exp = {c: math.exp((s - top) / t) for c, s in sc.items()}
    total = sum(exp.values())
    return sorted(((c, e / total) for c, e in exp.items()), key=lambda x: (-x[1], x[0]))


def leave_one_repo_out(docs: list[tuple[str, str, frozenset[str]]], temperature: float = 1.0):
    """(true category, ranked [(category, probability)]) for each doc, each scored by a model
    trained without the doc's repository."""
    out = []
    for repo in sorted({r for r, _c, _f in docs}):
        model = fit([(c, f) for r, c, f in docs if r != repo])
        model["temperature"] = temperature
        for r, c, f in docs:
            if r == repo:
                out.append((c, probabilities(model, f)))
    return out


def train(docs: list[tuple[str, str, frozenset[str]]]) -> dict:
    """The shipped model: weights from every train doc; temperature and calibration from
    leave-one-repository-out over the same docs."""
    best = max(TEMPERATURES, key=lambda t: (sum(
        math.log(max(dict(ranked).get(c, 0.0), 1e-12))
        for c, ranked in leave_one_repo_out(docs, t)), -t))
    loro = leave_one_repo_out(docs, best)
    calibration = []
    for lo, hi in zip(BINS, BINS[1:] + (1.01,)):
        hits = [ranked[0][0] == c for c, ranked in loro if lo <= ranked[0][1] < hi]
        # (right + 1) / (n + 2): a bin with few logs is not taken at its word
        calibration.append([lo, round((sum(hits) + 1) / (len(hits) + 2), 3), len(hits)])
    model = fit([(c, f) for _r, c, f in docs])
    model["temperature"] = best
    model["calibration"] = calibration
    model["weights"] = {f: {c: round(w, 4) for c, w in sorted(ws.items())}
                        for f, ws in sorted(model["weights"].items())}
    model["default"] = {c: round(w, 4) for c, w in model["default"].items()}
    model["train_logs"] = len(docs)
    model["train_digest"] = digest(docs)
    return model


def digest(docs) -> str:
    h = hashlib.sha256()
    for r, c, f in sorted((r, c, sorted(f)) for r, c, f in docs):
        h.update(json.dumps([r, c, f]).encode())
    return h.hexdigest()[:16]


def dumps(model: dict) -> str:
    head = {"about": "generated by scripts/train_diagnose_fallback.py from the corpus's train "
                     "split; do not edit"}
    return json.dumps(dict(head, **model), indent=0, sort_keys=True) + "\n"


# ---- use -------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def load() -> dict:
    text = resources.files("ddpkit.data").joinpath(MODEL).read_text(encoding="utf-8")
    return json.loads(text)


def confidence(model: dict, p: float) -> float:
    conf = 0.0
    for lo, acc, _n in model["calibration"]:
        if p >= lo:
            conf = acc
    return round(min(CAP, conf), 3)


def guesses(scan: Scanner, model: dict | None = None, top: int = 2) -> list[dict]:
    """Up to `top` ranked guesses, each: category, probability, confidence, and the features
    that pushed it up most with the lines that hold them. [] when the model abstains."""
    model = model or load()
    found = features(scan)
    known = [f for f in found if f in model["weights"]]
    if len(known) < MIN_FEATURES:
        return []
    ranked = probabilities(model, known)
    if ranked[0][1] < ABSTAIN:
        return []
    out = []
    for cat, p in ranked[:top]:
        if out and p < ABSTAIN / 2:
            break
        lifts = {f: _lift(model, f, cat) for f in known}
        strongest = sorted((f for f in known if lifts[f] > 0), key=lambda f: (-lifts[f], f))[:6]
        if not strongest:
            continue
        out.append({"category": cat, "probability": round(p, 3),
                    "confidence": confidence(model, p),
                    "features": [(f, found[f]) for f in strongest]})
    return out


def _lift(model: dict, feature: str, cat: str) -> float:
    """How much a feature pushes `cat` up against the mean of the other categories."""
    w, default = model["weights"][feature], model["default"]
    others = [c for c in model["categories"] if c != cat]
    mine = w.get(cat, default[cat])
    return mine - sum(w.get(c, default[c]) for c in others) / max(1, len(others))
