"""argparse's own messages ("usage:", "options", its errors) in the user's language.

argparse looks its messages up through a module-level `_` at call time; pointing that at our
catalog translates them without subclassing every formatter. The messages are listed here so
the extractor puts them in ddpkit's catalog (Python ships no Chinese catalog for argparse).
"""

from __future__ import annotations

import argparse

from ddpkit.i18n import N_, _, ngettext

MESSAGES = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("show program's version number and exit"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("unrecognized arguments: %s"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("not allowed with argument %s"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("ignored explicit argument %r"),
    N_("can't open '%(filename)s': %(error)s"),
    N_("%(prog)s: error: %(message)s\n"),
)


def install() -> None:
    argparse._ = _  # type: ignore[attr-defined]
    argparse.ngettext = ngettext  # type: ignore[attr-defined]
