"""Is an NCCL_* / TORCH_NCCL_* name one that NCCL or torch reads? One pure classifier over the
shipped lists (nccl_env_vars.txt, env_notes.toml) for `ddpkit doctor` (the environment) and
`ddpkit lint` (scripts). It returns a verdict, not a message: each command words it itself,
in the user's language."""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from typing import Literal

from ddpkit.data import NCCL_PLUGIN_PREFIXES, load_toml, nccl_env_vars

Kind = Literal["renamed", "noop", "removed", "plugin", "unknown"]


@dataclass(frozen=True, slots=True)
class EnvNameVerdict:
    """kind: renamed (torch's deprecated spelling of `suggestion`), noop (in no release, see
    `why`), removed (from NCCL), plugin (read by a network/tuner plugin, not by NCCL), unknown
    (read by nobody we know; `suggestion` is the nearest real name, if any)."""

    kind: Kind
    name: str
    reader: Literal["nccl", "torch"] = "nccl"  # who would read a name of this prefix
    suggestion: str = ""
    why: str = ""  # env_notes.toml's explanation of a noop name (English; a catalog msgid)
    timeout: bool = False  # an unknown name about a timeout: timeouts are torch's, not NCCL's


@functools.lru_cache(maxsize=1024)
def classify(name: str, cutoff: float = 0.6) -> EnvNameVerdict | None:
    """The verdict on `name`, None when NCCL or torch reads it. `cutoff` is how close
    (difflib ratio) a known name must be to be suggested for an unknown one."""
    notes = load_toml("env_notes.toml")
    renamed = notes.get("renamed", {})
    if name in renamed:
        return EnvNameVerdict("renamed", name, suggestion=renamed[name])
    noop = notes.get("noop", {})
    if name in noop:
        return EnvNameVerdict("noop", name, why=noop[name].get("why", ""))
    if name in notes.get("other", {}).get("names", ()):
        return None  # set on purpose by other tools (CUDA images, builds), never NCCL's
    if name.startswith("NCCL_"):
        known = nccl_env_vars()
        status = known.get(name)
        if status == "removed":  # older NCCL releases still read it
            return EnvNameVerdict("removed", name)
        if status is None and name.startswith(NCCL_PLUGIN_PREFIXES):
            return EnvNameVerdict("plugin", name)
        if status is None:
            return EnvNameVerdict("unknown", name, suggestion=_nearest(name, list(known), cutoff,
                                                                         "NCCL_"),
                                  timeout="TIMEOUT" in name or "TIME_OUT" in name)
        return None
    if name.startswith("TORCH_NCCL_"):
        known_torch = notes.get("torch", {}).get("names", [])
        if name not in known_torch:
            return EnvNameVerdict("unknown", name, "torch",
                                  _nearest(name, known_torch, cutoff, "TORCH_NCCL_"))
    return None


def _nearest(name: str, known: list[str], cutoff: float, prefix: str) -> str:
    """The known name nearest to `name`, compared without the prefix they all share (with it,
    NCCL_VERSION and NCCL_IBVERBS_LIB looked alike enough to be offered as a typo)."""
    tails = {k[len(prefix):]: k for k in known if k.startswith(prefix)}
    close = difflib.get_close_matches(name[len(prefix):], list(tails), n=1, cutoff=cutoff)
    return tails[close[0]] if close else ""
