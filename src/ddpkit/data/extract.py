"""Babel extractor for the human text in ddpkit's TOML knowledge files (make i18n).

Knowledge lives in data files (env notes, failure signatures, lint rules); its explanations and
fixes are shown to people, so they go through the same catalog as the code's messages. The code
shows them with `_(entry["why"])`; this finds them for the extractor: every string value (or
string in a list) under a key named in HUMAN_KEYS.
"""

from __future__ import annotations

from typing import Any, Iterator

HUMAN_KEYS = frozenset({"why", "title", "summary", "detail", "hint", "fix", "explain",
                        "explanation", "message", "description", "cause", "next", "checks"})


def _strings(node: Any, key: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from _strings(item, key)
    elif isinstance(node, str) and key in HUMAN_KEYS and node.strip():
        yield node


def extract_toml(fileobj, keywords, comment_tags, options):
    """Babel's extractor protocol: yields (lineno, funcname, message, comments)."""
    from ddpkit.data import tomllib

    text = fileobj.read().decode("utf-8")
    for message in _strings(tomllib.loads(text)):
        first = message.splitlines()[0][:40]
        at = text.find(first)
        yield (text.count("\n", 0, at) + 1 if at >= 0 else 0), None, message, []
