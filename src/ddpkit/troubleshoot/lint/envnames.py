"""Is an NCCL_* name one NCCL reads? The verdict is data/envnames.py's (the same one
`ddpkit doctor` gives the environment); this words it as a lint finding."""

from __future__ import annotations

from ddpkit.data.envnames import classify
from ddpkit.i18n import _

# A script names a variable on purpose: suggest a real name only when it is very close.
_CUTOFF = 0.85


def judge(name: str) -> tuple[str, str] | None:
    """(severity, message) for a name NCCL does not read, None for a real one."""
    v = classify(name, _CUTOFF)
    if v is None:
        return None
    if v.kind == "renamed":
        return "info", _("{name} is torch's deprecated spelling of {new} (NCCL ignores it)").format(
            name=name, new=v.suggestion)
    if v.kind == "noop":
        return "warn", _("{name} is not read by NCCL: it does nothing").format(name=name)
    if v.kind == "removed":
        return "info", _("{name} was removed from NCCL and has no effect on current "
                         "releases").format(name=name)
    if v.kind == "plugin":
        return "info", _("{name} is read by a network plugin, not by NCCL itself").format(name=name)
    if v.suggestion:
        return "warn", _("{name} is not a variable NCCL reads (did you mean {near}?)").format(
            name=name, near=v.suggestion)
    if v.timeout:  # the guides' favourite non-variable
        return "warn", _("{name} is not a variable NCCL reads; timeouts are torch's").format(
            name=name)
    # network and tuner plugins (GCP TCPX/FasTrak, AWS OFI, SHARP) read their own NCCL_*
    return "info", _("{name} is not read by NCCL itself (a network plugin may read it)").format(
        name=name)
