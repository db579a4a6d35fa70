"""Is an NCCL_* name one NCCL reads? Judged from the shipped lists (data/nccl_env_vars.txt,
data/env_notes.toml), the same knowledge `ddpkit doctor` uses for the environment."""

from __future__ import annotations

import difflib
import functools

from ddpkit.data import NCCL_PLUGIN_PREFIXES, load_toml, nccl_env_vars


@functools.lru_cache(maxsize=512)
def judge(name: str) -> tuple[str, str] | None:
    """(severity, message) for a name NCCL does not read, None for a real one."""
    notes = load_toml("env_notes.toml")
    renamed = notes.get("renamed", {})
    if name in renamed:
        return "info", f"{name} is torch's deprecated spelling of {renamed[name]} (NCCL ignores it)"
    if name in notes.get("noop", {}):
        return "warn", f"{name} is not read by NCCL: it does nothing"
    status = nccl_env_vars().get(name)
    if status == "removed":  # older NCCL releases still read it: a note
        return "info", f"{name} was removed from NCCL and has no effect on current releases"
    if status is None and name.startswith(NCCL_PLUGIN_PREFIXES):
        return "info", f"{name} is read by a network plugin, not by NCCL itself"
    if status is None:
        near = difflib.get_close_matches(name, list(nccl_env_vars()), n=1, cutoff=0.85)
        if near:
            return "warn", f"{name} is not a variable NCCL reads (did you mean {near[0]}?)"
        if "TIMEOUT" in name or "TIME_OUT" in name:  # the guides' favourite non-variable
            return "warn", f"{name} is not a variable NCCL reads; timeouts are torch's"
        # network and tuner plugins (GCP TCPX/FasTrak, AWS OFI, SHARP) read their own NCCL_*
        return "info", f"{name} is not read by NCCL itself (a network plugin may read it)"
    return None
