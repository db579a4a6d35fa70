"""/etc/os-release -> distribution facts and the family that decides our hint commands."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class OsInfo:
    id: str = ""
    version_id: str = ""
    pretty: str = ""
    family: str = "other"  # "rhel" (dnf/yum + firewalld), "debian" (apt + ufw), "suse", "other"

    @property
    def pkg(self) -> str:
        """The package manager a hint should name."""
        if self.family == "rhel":
            return "yum" if self.version_id.split(".")[0] in ("6", "7") else "dnf"
        if self.family == "debian":
            return "apt-get"
        if self.family == "suse":
            return "zypper"
        return "your package manager"

    @property
    def firewall(self) -> str:
        """The firewall front-end the distribution ships by default."""
        return {"rhel": "firewalld", "debian": "ufw", "suse": "firewalld"}.get(self.family, "iptables")

    def to_dict(self) -> dict:
        return {"id": self.id, "version_id": self.version_id, "pretty": self.pretty,
                "family": self.family}


_FAMILIES = (  # checked in order: ID first, then each ID_LIKE word
    ("rhel", {"rhel", "centos", "rocky", "almalinux", "fedora", "ol", "amzn", "anolis",
              "openeuler", "kylin"}),
    ("debian", {"debian", "ubuntu", "linuxmint", "pop", "uos", "deepin"}),
    ("suse", {"suse", "sles", "opensuse", "opensuse-leap", "opensuse-tumbleweed"}),
)


def parse_os_release(text: str) -> OsInfo:
    fields: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value.strip("\"'")]
        fields[key.strip()] = parts[0] if parts else ""
    words = [fields.get("ID", "").lower(), *fields.get("ID_LIKE", "").lower().split()]
    family = "other"
    for word in words:
        for name, members in _FAMILIES:
            if word in members:
                family = name
                break
        if family != "other":
            break
    return OsInfo(id=fields.get("ID", ""), version_id=fields.get("VERSION_ID", ""),
                  pretty=fields.get("PRETTY_NAME", ""), family=family)
