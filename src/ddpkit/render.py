"""Turn result data into terminal output or JSON. rich is imported only when a table is drawn."""

from __future__ import annotations

import json
import sys
from typing import Any

STATUS_STYLE = {"ok": ("ok", "green"), "warn": ("warn", "yellow"), "fail": ("FAIL", "bold red"),
                "skip": ("skip", "dim")}


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def status_text(status: str):
    from rich.text import Text

    label, style = STATUS_STYLE.get(status, (status, ""))
    return Text(label, style=style)
