#!/usr/bin/env python3
"""Codemod: wrap human-facing string literals of ddpkit in gettext calls.

Finds strings passed where ddpkit shows text to a person (CheckResult summary/detail/hint,
errors' message/hint, Problem/NodeProblem texts, argparse help/description, rich/console/print
output) and rewrites `f"port {port} is free"` into `_("port {port} is free").format(port=port)`,
and `"plain"` into `_("plain")`, then adds `from ddpkit.i18n import _`. Strings already inside
`_()`/`N_()` are left alone. Run it, then `make i18n` to extract and update the catalogs.

    python scripts/i18n_wrap.py src/ddpkit/prepare/checks/*.py     # rewrites in place
    python scripts/i18n_wrap.py --check FILE...                    # lists what it would wrap
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

# call name -> positional indexes that are human text; keyword names that are human text
CALLS = {
    "CheckResult": ((2,), ("detail", "hint")),
    "UsageError": ((0, 1), ("hint",)),
    "EnvironmentFailure": ((0, 1), ("hint",)),
    "DdpkitError": ((0, 1), ("hint",)),
    "PreflightError": ((), ()),
    "Problem": ((3, 4), ("message", "fix")),
    "NodeProblem": ((2, 3), ("message", "fix")),
    "add_argument": ((), ("help",)),
    "add_argument_group": ((0, 1), ("title", "description")),
    "add_parser": ((), ("help", "description")),
    "Parser": ((), ("description", "epilog")),
    "ArgumentParser": ((), ("description", "epilog")),
    "Finding": ((), ("title", "fix", "summary", "explanation")),
    "make": ((3,), ("message", "fix")),  # lint findings
    "twin": ((3,), ()),
    "DemoCheck": ((2,), ("detail",)),
    "_sub": ((2,), ()),
    "Table": ((), ("title",)),
}
SKIP_FUNCS = {"_", "N_", "ngettext"}
# plain assignments whose value is shown to a person: `hint = "..."`
HUMAN_VARS = {"hint", "detail", "summary", "message", "fix", "note", "why", "verdict", "what",
              "reason", "advice", "headline"}
PRINT_CALLS = {"print", "write", "log", "note", "warn", "err", "status"}
# Words of a string that is not prose: an id, a command alone, a format, a regex, a path
NOT_PROSE = re.compile(r"^[\w.:/@%{}\-\[\]=,+*^$()|\\<> ']*$")


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _is_prose(text: str) -> bool:
    words = re.findall(r"[A-Za-z]{2,}", text)
    return len(words) >= 2 and " " in text.strip()


def _placeholder(expr: ast.expr, used: dict[str, str], source: str) -> str:
    seg = ast.get_source_segment(source, expr) or "value"
    if isinstance(expr, ast.Subscript) and isinstance(expr.slice, ast.Constant) \
            and isinstance(expr.slice.value, str) and expr.slice.value.isidentifier():
        expr = ast.Name(id=expr.slice.value)
    while isinstance(expr, (ast.Subscript, ast.BinOp)):
        expr = expr.value if isinstance(expr, ast.Subscript) else expr.left
    if isinstance(expr, ast.Call) and _name(expr.func) in ("len", "join", "sorted", "str",
                                                            "int", "round", "list") and expr.args:
        prefix = "n_" if _name(expr.func) == "len" else ""
        inner = expr.args[0]
        while isinstance(inner, (ast.Subscript, ast.Call)) and not isinstance(inner, ast.Name):
            inner = inner.value if isinstance(inner, ast.Subscript) else (
                inner.args[0] if inner.args else inner.func)
        base = prefix + (inner.id if isinstance(inner, ast.Name) else
                         inner.attr if isinstance(inner, ast.Attribute) else "items")
    elif isinstance(expr, ast.Name):
        base = expr.id
    elif isinstance(expr, ast.Attribute):
        base = expr.attr
    elif isinstance(expr, ast.GeneratorExp):
        base = "items"
    elif isinstance(expr, ast.Call) and _name(expr.func):
        base = _name(expr.func).strip("_") or "value"
    else:
        base = "value"
    base = re.sub(r"\W", "_", base).strip("_").lower() or "value"
    name, i = base, 2
    while name in used and used[name] != seg:
        name, i = f"{base}{i}", i + 1
    used[name] = seg
    return name


def _flatten(node: ast.expr) -> list[ast.expr] | None:
    """`"a " + f(x) + f"b {y}"` -> its parts, when at least one part is a literal."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _flatten(node.left), _flatten(node.right)
        return (left or [node.left]) + (right or [node.right])
    return None


def _rewrite(node: ast.expr, source: str) -> str | None:
    """The replacement source for a str, f-string or str concatenation, or None to leave it."""
    parts = _flatten(node)
    if parts is not None:
        if not any(isinstance(p, (ast.Constant, ast.JoinedStr)) for p in parts):
            return None
        if any(isinstance(p, ast.Constant) and not isinstance(p.value, str) for p in parts):
            return None
        values: list[ast.expr] = []
        for p in parts:
            if isinstance(p, ast.JoinedStr):
                values += p.values
            elif isinstance(p, ast.Constant):
                values.append(p)
            else:
                values.append(ast.FormattedValue(value=p, conversion=-1, format_spec=None))
        node = ast.JoinedStr(values=values)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        if not _is_prose(node.value):
            return None
        return f"_({node.value!r})"
    if not isinstance(node, ast.JoinedStr):
        return None
    text, used = [], {}
    for part in node.values:
        if isinstance(part, ast.Constant):
            text.append(part.value.replace("{", "{{").replace("}", "}}"))
            continue
        assert isinstance(part, ast.FormattedValue)
        name = _placeholder(part.value, used, source)
        conv = {-1: "", 115: "!s", 114: "!r", 97: "!a"}[part.conversion]
        spec = ""
        if part.format_spec is not None:
            spec = ":" + "".join(p.value for p in part.format_spec.values
                                 if isinstance(p, ast.Constant))
        text.append("{" + name + conv + spec + "}")
    msg = "".join(text)
    if not _is_prose(re.sub(r"\{[^}]*\}", "", msg)):
        return None
    args = ", ".join(f"{k}={v}" for k, v in used.items())
    return f"_({msg!r}).format({args})"


def _targets(tree: ast.AST) -> list[ast.expr]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in HUMAN_VARS:
            out.append(node.value)
            continue
        if not isinstance(node, ast.Call):
            continue
        name = _name(node.func)
        if name in SKIP_FUNCS:
            continue
        if name in CALLS:
            pos, kws = CALLS[name]
            out += [node.args[i] for i in pos if i < len(node.args)]
            out += [k.value for k in node.keywords if k.arg in kws]
        elif name in PRINT_CALLS:
            out += list(node.args[:1])
    while any(isinstance(t, ast.IfExp) for t in out):  # `"a" if x else f"b {y}"`: both sides
        out = [u for t in out for u in ((t.body, t.orelse) if isinstance(t, ast.IfExp) else (t,))]
    return [t for t in out if isinstance(t, (ast.Constant, ast.JoinedStr, ast.BinOp))]


def _underscore_stores(tree: ast.AST) -> list[ast.Name]:
    """Throwaway `_` variables (`soft, _ = ...`) would shadow gettext's _ in their function."""
    return [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "_"
            and isinstance(n.ctx, ast.Store)]


def wrap_source(source: str) -> tuple[str, int]:
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    edits = []
    for node in _targets(tree):
        new = _rewrite(node, source)
        if new is None:
            continue
        start = offsets[node.lineno - 1] + len(
            lines[node.lineno - 1].encode()[:node.col_offset].decode())
        end = offsets[node.end_lineno - 1] + len(
            lines[node.end_lineno - 1].encode()[:node.end_col_offset].decode())
        edits.append((start, end, new))
    if edits:
        for n in _underscore_stores(tree):
            start = offsets[n.lineno - 1] + len(
                lines[n.lineno - 1].encode()[:n.col_offset].decode())
            edits.append((start, start + 1, "_unused"))
    for start, end, new in sorted(edits, reverse=True):
        source = source[:start] + new + source[end:]
    if edits and not re.search(r"^from ddpkit\.i18n import .*\b_\b", source, re.M):
        source = _add_import(source)
    return source, len(edits)


def _add_import(source: str) -> str:
    m = re.search(r"^from __future__ import annotations\n", source, re.M)
    at = m.end() if m else 0
    return source[:at] + "\nfrom ddpkit.i18n import _\n" + source[at:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--check", action="store_true", help="only count what would be wrapped")
    args = ap.parse_args()
    total = 0
    for f in args.files:
        path = Path(f)
        new, n = wrap_source(path.read_text())
        total += n
        if n and not args.check:
            path.write_text(new)
        if n:
            print(f"{path}: {n}")
    print(f"{total} string(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
