"""Parsing for the Python rules: a tolerant parse for old scripts, the parent map, names."""

from __future__ import annotations

import ast
import re

_PY2_PRINT = re.compile(r"^(\s*)print\s+(?![\s(=.,)\]])(.*?)(\s*(#.*)?)$")
_PY2_EXCEPT = re.compile(r"^(\s*except\s+[\w.()\s,]+?)\s*,\s*(\w+)\s*:")


def parse_tolerant(text: str) -> ast.Module:
    """ast.parse, then once more after line-for-line repairs of what old scripts still contain
    (Python 2 print and except, `async=True` from torch 0.3): line numbers stay the same."""
    try:
        return ast.parse(text)
    except SyntaxError as first:
        lines = []
        for line in text.split("\n"):
            line = re.sub(r"\basync\s*=", "async_=", line)
            line = _PY2_EXCEPT.sub(r"\1 as \2:", line)
            m = _PY2_PRINT.match(line)
            if m and not line.rstrip().endswith(("\\", ",")):
                line = f"{m.group(1)}print({m.group(2)}){m.group(3)}"
            lines.append(line)
        try:
            return ast.parse("\n".join(lines))
        except SyntaxError:
            raise first from None


def parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    """child -> parent for every node; a plain loop, several times faster than ast.walk."""
    parent: dict[ast.AST, ast.AST] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        for name in node._fields:
            val = getattr(node, name, None)
            if isinstance(val, list):
                for v in val:
                    if isinstance(v, ast.AST):
                        parent[v] = node
                        stack.append(v)
            elif isinstance(val, ast.AST):
                parent[val] = node
                stack.append(val)
    return parent


def dotted(node: ast.AST) -> str:
    """'self.model' for an attribute chain of names (ast.unparse for anything else)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return ast.unparse(node) + "".join(f".{p}" for p in reversed(parts))
