"""Knowledge shipped with ddpkit, loaded once per process."""

from __future__ import annotations

import functools
import sys
from importlib import resources
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def read_text(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def load_toml(name: str) -> dict[str, Any]:
    return tomllib.loads(read_text(name))


@functools.lru_cache(maxsize=None)
def nccl_env_vars() -> dict[str, str]:
    """NCCL_* name -> 'documented' | 'source-only' | 'removed'."""
    out = {}
    for line in read_text("nccl_env_vars.txt").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("NCCL_"):
            out[parts[0]] = parts[1]
    return out


# NCCL_* names read by network/tuner plugins, not by NCCL: GCP GPUDirect-TCPX/TCPXO (FasTrak,
# shimnet), AWS OFI, Mellanox SHARP/IB extensions, tuner plugins. Setting them is right; the
# doctor and lint both take them from here.
NCCL_PLUGIN_PREFIXES = ("NCCL_FASTRAK_", "NCCL_GPUDIRECTTCPX_", "NCCL_TCPX_", "NCCL_TCPXO_",
                        "NCCL_SHIMNET_", "NCCL_TUNER_", "NCCL_OFI_", "NCCL_SHARP_",
                        "NCCL_IBEXT_", "NCCL_PLUGIN_")
