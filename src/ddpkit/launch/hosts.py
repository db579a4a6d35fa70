"""Host specs -> [Host]: `-H a:4,b:4`, MPI/DeepSpeed hostfiles, SLURM allocations.

Parsing is pure (strings and mappings in, Hosts out); only resolve_hosts reads the hostfile.
Every error names the spec, the bad part and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from ddpkit.errors import UsageError
from ddpkit.i18n import N_, _


@dataclass(frozen=True)
class Host:
    name: str  # host name or address as the user wrote it, without user@
    slots: int | None = None  # processes on this host; None: not given
    user: str = ""

    @property
    def target(self) -> str:
        """What ssh is given: user@name or name."""
        return f"{self.user}@{self.name}" if self.user else self.name

    def to_dict(self) -> dict:
        return {"name": self.name, "slots": self.slots, "user": self.user}


# A host name never starts with "-": ssh would read it as an option (-oProxyCommand=...).
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


HOSTFILE_FORMS = N_("write 'node0 slots=4' (MPI/DeepSpeed) or 'node0:4', one host a line")


def _slots(text: str, where: str, part: str, hint: str = N_("write HOST:SLOTS, e.g. node0:4")) -> int:
    if not text.isdigit():
        raise UsageError(_("{where}: slots in '{part}' must be a positive integer, not '{text}'").format(where=where, part=part, text=text),
                         _(hint))
    value = int(text)
    if value < 1:
        raise UsageError(_("{where}: '{part}' has {value} slots").format(where=where, part=part, value=value), _('give each host at least 1 slot'))
    return value


def parse_host(part: str, where: str = "-H") -> Host:
    """'node0', 'node0:4', 'user@node0:4', '[fe80::1]:4', '10.0.0.2'."""
    part = part.strip()
    user, _unused, rest = part.rpartition("@") if "@" in part else ("", "", part)
    if "@" in part and not user:
        raise UsageError(_("{where}: '{part}' has an empty user name").format(where=where, part=part), _('write USER@HOST[:SLOTS]'))
    if user and not _USER.match(user):
        raise UsageError(_("{where}: '{user}' in '{part}' is not a user name").format(where=where, user=user, part=part),
                         _('write USER@HOST[:SLOTS] with a plain user name'))
    slots: int | None = None
    if rest.startswith("["):  # IPv6 literal
        close = rest.find("]")
        if close < 0:
            raise UsageError(_("{where}: '{part}' has an unclosed '['").format(where=where, part=part), _('write [ADDR]:SLOTS'))
        name, tail = rest[1:close], rest[close + 1:]
        if not re.match(r"^[0-9A-Fa-f:.%]+$", name):
            raise UsageError(_("{where}: '{part}' is not an IPv6 address").format(where=where, part=part), _('write [ADDR]:SLOTS'))
        if tail:
            if not tail.startswith(":"):
                raise UsageError(_("{where}: cannot read '{part}'").format(where=where, part=part), _('write [ADDR]:SLOTS'))
            slots = _slots(tail[1:], where, part)
        return Host(name, slots, user)
    name, sep, count = rest.partition(":")
    if sep:
        slots = _slots(count, where, part, *([HOSTFILE_FORMS] if where != "-H" else []))
    if not name or not _NAME.match(name):
        raise UsageError(_("{where}: '{part}' is not a host name").format(where=where, part=part), _('use HOST[:SLOTS], e.g. node0:4'))
    return Host(name, slots, user)


def check_unique(hosts: list[Host], where: str) -> list[Host]:
    if not hosts:
        raise UsageError(_('{where}: no hosts given').format(where=where), _('e.g. -H node0:4,node1:4'))
    seen: dict[str, int] = {}
    for i, h in enumerate(hosts):
        if h.name in seen:
            raise UsageError(_("{where}: host '{name}' is listed twice (entries {seen} and {i})").format(where=where, name=h.name, seen=seen[h.name] + 1, i=i + 1), _('list each host once and give it all its slots'))
        seen[h.name] = i
    return hosts


def parse_host_list(spec: str) -> list[Host]:
    """`-H node0:4,node1:4` (Horovod/mpirun style)."""
    if not spec.strip():
        raise UsageError(_('-H: empty host list'), _('e.g. -H node0:4,node1:4'))
    parts = [p for p in spec.split(",")]
    if any(not p.strip() for p in parts):
        raise UsageError(_("-H '{spec}': empty entry between commas").format(spec=spec), _('e.g. -H node0:4,node1:4'))
    return check_unique([parse_host(p, "-H") for p in parts], "-H")


_MPI_SLOTS = re.compile(r"^(?:slots|max_slots|max-slots)\s*=\s*(\S+)$")


def parse_hostfile(text: str, path: str = "hostfile") -> list[Host]:
    """MPI/DeepSpeed (`node0 slots=4`) and `host:slots` lines; '#' comments and blanks ignored."""
    hosts: list[Host] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{lineno}"
        words = line.split()
        host = parse_host(words[0], where)
        for word in words[1:]:
            m = _MPI_SLOTS.match(word)
            if not m:
                raise UsageError(_("{where}: cannot read '{word}' in '{line}'").format(where=where, word=word, line=line),
                                 _(HOSTFILE_FORMS))
            if word.startswith("slots"):
                if host.slots is not None:
                    raise UsageError(_("{where}: slots given twice in '{line}'").format(where=where, line=line), _('give slots once'))
                host = Host(host.name, _slots(m.group(1), where, line, HOSTFILE_FORMS), host.user)
        hosts.append(host)
    return check_unique(hosts, path)


def expand_nodelist(spec: str) -> list[str]:
    """SLURM node list: 'gpu[01-04,07],cpu1' -> gpu01 gpu02 gpu03 gpu04 gpu07 cpu1."""
    names: list[str] = []
    depth, start = 0, 0
    pieces: list[str] = []
    for i, ch in enumerate(spec):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            pieces.append(spec[start:i])
            start = i + 1
    pieces.append(spec[start:])
    for piece in (p.strip() for p in pieces):
        if not piece:
            continue
        m = re.match(r"^([^\[]*)\[([^\]]+)\](.*)$", piece)
        if not m:
            names.append(piece)
            continue
        prefix, body, suffix = m.groups()
        for rng in body.split(","):
            lo, sep, hi = rng.partition("-")
            if not lo.isdigit() or (sep and not hi.isdigit()):
                raise UsageError(_("SLURM_JOB_NODELIST: cannot read range '{rng}' in '{spec}'").format(rng=rng, spec=spec),
                                 _('expected e.g. gpu[01-04,07]'))
            width = len(lo)
            for n in range(int(lo), int(hi if sep else lo) + 1):
                for tail in expand_nodelist(suffix) if suffix else [""]:
                    names.append(f"{prefix}{n:0{width}d}{tail}")
    return names


def expand_tasks_per_node(spec: str, count: int) -> list[int]:
    """SLURM_TASKS_PER_NODE / SLURM_NTASKS_PER_NODE: '4', '2(x3),1' -> one number per node."""
    out: list[int] = []
    for part in spec.split(","):
        m = re.match(r"^(\d+)(?:\(x(\d+)\))?$", part.strip())
        if not m:
            raise UsageError(_("SLURM tasks per node: cannot read '{spec}'").format(spec=spec), _('expected e.g. 4 or 2(x3)'))
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(out) == 1:
        out *= count
    if len(out) != count:
        raise UsageError(_("SLURM gives {n_out} task counts for {count} nodes ('{spec}')").format(n_out=len(out), count=count, spec=spec),
                         _('check SLURM_NTASKS_PER_NODE against SLURM_JOB_NODELIST'))
    return out


def slurm_hosts(env: Mapping[str, str]) -> list[Host] | None:
    """Hosts of the SLURM allocation we run inside, None when not inside one."""
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        return None
    names = expand_nodelist(nodelist)
    per_node = env.get("SLURM_NTASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    slots = expand_tasks_per_node(per_node, len(names)) if per_node else [None] * len(names)
    return check_unique([Host(n, s) for n, s in zip(names, slots)], "SLURM_JOB_NODELIST")


def resolve_hosts(host_list: str | None, hostfile: str | None,
                  env: Mapping[str, str]) -> tuple[list[Host], str]:
    """(hosts, where they came from). Order of precedence: -H, --hostfile, a SLURM allocation,
    then this machine alone (an explicit flag always wins over what the environment implies)."""
    if host_list is not None and hostfile is not None:
        raise UsageError(_('-H and --hostfile both given'), _('use one of them'))
    if host_list is not None:
        return parse_host_list(host_list), "-H"
    if hostfile is not None:
        try:
            with open(hostfile, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as exc:
            raise UsageError(f"--hostfile {hostfile}: {exc.strerror}",
                             _('give the path of a file with one host a line')) from None
        return parse_hostfile(text, hostfile), "--hostfile"
    slurm = slurm_hosts(env)
    if slurm is not None:
        return slurm, "SLURM"
    return [Host("localhost")], "local"
