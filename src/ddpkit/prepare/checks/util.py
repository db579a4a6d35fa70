"""Small helpers shared by the check functions."""

from __future__ import annotations

import re

from ddpkit.i18n import _
from ddpkit.parsers.osrelease import OsInfo


def vtuple(version: str) -> tuple[int, ...]:
    """'535.104.05' -> (535, 104, 5); non-numeric parts are ignored ('2.13.0+cpu' -> (2, 13, 0))."""
    out = []
    for part in re.split(r"[.+-]", version):
        if not part.isdigit():
            break
        out.append(int(part))
    return tuple(out)


def install_cmd(os_info: OsInfo, rhel_pkg: str, debian_pkg: str) -> str:
    if os_info.family == "rhel":
        return f"sudo {os_info.pkg} install -y {rhel_pkg}"
    if os_info.family == "debian":
        return f"sudo apt-get install -y {debian_pkg}"
    return _("install {package} with your package manager").format(package=debian_pkg)


def gib(n_bytes: float) -> str:
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.0f} MiB"
