"""Turn result data into terminal output or JSON. rich is imported only when a table is drawn."""

from __future__ import annotations

import json
import sys
from typing import Any

from ddpkit.i18n import N_, _

STATUS_STYLE = {"ok": (N_("ok"), "green"), "warn": (N_("warn"), "yellow"),
                "fail": (N_("FAIL"), "bold red"), "skip": (N_("skip"), "dim")}


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def status_text(status: str):
    from rich.text import Text

    label, style = STATUS_STYLE.get(status, (status, ""))
    return Text(_(label), style=style)
