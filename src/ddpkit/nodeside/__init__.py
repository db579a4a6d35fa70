"""Programs that run on the nodes, sent as source over SSH (`python -c`).

They use the standard library only and must run on any Python 3.6+, so a node needs no ddpkit
installed: only the interpreter that holds torch.
"""

from __future__ import annotations

from importlib import resources


def source(name: str) -> str:
    """The source text of nodeside/<name>.py, ready for `python -c`."""
    return resources.files(__name__).joinpath(f"{name}.py").read_text(encoding="utf-8")
