"""`nft list ruleset` -> the input chains and how each treats a TCP connection from the
cluster. Pure; table-tested on recorded rulesets.

Only base chains hooked on input matter for connections to this host. Chains that iptables-nft
manages (`table ip filter { chain INPUT ...`, upper-case names) are iptables' business: their
rules show in `iptables -S` and are fixed with iptables.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

_TABLE = re.compile(r"^\s*table\s+(\w+)\s+(\S+)\s*\{")
_CHAIN = re.compile(r"^\s*chain\s+(\S+)\s*\{")
_HOOK = re.compile(r"type\s+filter\s+hook\s+(\w+)\s+priority\s+[^;]+;\s*(?:policy\s+(\w+);)?")
_DPORT = re.compile(r"\btcp\s+dport\s+(\{[^}]*\}|\S+)")
_SADDR = re.compile(r"\bip\s+saddr\s+(\{[^}]*\}|\S+)")


@dataclass(frozen=True)
class NftChain:
    family: str  # inet | ip | ip6 | ...
    table: str
    name: str
    hook: str
    policy: str  # accept | drop
    rules: tuple[str, ...]

    @property
    def iptables_managed(self) -> bool:
        return self.family in ("ip", "ip6") and self.name.isupper()


def parse_chains(ruleset: str) -> list[NftChain]:
    """Base chains (those with a hook) of every table, rules in order."""
    out: list[NftChain] = []
    family = table = chain = hook = policy = ""
    rules: list[str] = []
    depth, in_chain = 0, False
    for raw in ruleset.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("}"):
            if depth == 2 and in_chain and hook:
                out.append(NftChain(family, table, chain, hook, policy, tuple(rules)))
            in_chain = in_chain and depth != 2
            depth = max(0, depth - 1)
            continue
        m = _TABLE.match(line)
        if m and depth == 0:
            family, table, depth = m.group(1), m.group(2), 1
            continue
        m = _CHAIN.match(line)
        if m and depth == 1:
            chain, hook, policy, rules, depth, in_chain = m.group(1), "", "accept", [], 2, True
            continue
        opens = line.endswith("{")
        if depth == 2 and in_chain and not opens:
            m = _HOOK.search(line)
            if m:
                hook, policy = m.group(1), (m.group(2) or "accept")
            elif not line.startswith(("type ", "policy ", "comment ")):
                rules.append(line)
        elif opens and depth >= 1:  # a set, map, flowtable, or a block inside one
            depth += 1
    return out


def _ports(spec: str) -> list[tuple[int, int]]:
    out = []
    for part in spec.strip("{} ").split(","):
        lo, _, hi = part.strip().partition("-")
        if lo.strip().isdigit() and (not hi or hi.strip().isdigit()):
            out.append((int(lo), int(hi or lo)))
    return out


def _in_subnet(spec: str, subnet: str) -> bool:
    try:
        want = ipaddress.ip_network(subnet, strict=False)
    except ValueError:
        return False
    for part in spec.strip("{} ").split(","):
        try:
            if want.subnet_of(ipaddress.ip_network(part.strip(), strict=False)):
                return True
        except (ValueError, TypeError):
            continue
    return False


def _verb(rule: str) -> str:
    words = re.sub(r"\bcomment\s+\"[^\"]*\"", "", rule).split()
    for verb in ("accept", "drop", "reject"):
        if verb in words:
            return verb
    return ""


def chain_verdict(chain: NftChain, port: int, subnet: str) -> tuple[str, str]:
    """(accept | drop | reject, the rule or 'policy X') for a new TCP connection to `port`
    from an address in `subnet`. Rules with matches we cannot judge are passed over, as if
    they did not match (established/related, loopback, other sources, udp)."""
    for rule in chain.rules:
        verb = _verb(rule)
        if not verb:
            continue
        words = rule.split()
        if "ct" in words or "iif" in words or "iifname" in words or "udp" in words:
            continue
        saddr = _SADDR.search(rule)
        if saddr and not _in_subnet(saddr.group(1), subnet):
            continue
        dport = _DPORT.search(rule)
        if dport and not any(lo <= port <= hi for lo, hi in _ports(dport.group(1))):
            continue
        rest = _DPORT.sub("", _SADDR.sub("", rule))
        if re.search(r"\b(meta|ip6?|tcp|th|sport|daddr|mark|icmp\w*)\b", rest):
            continue  # another match: cannot tell
        return verb, rule
    return chain.policy, f"policy {chain.policy}"


def trusts(chain: NftChain, subnet: str) -> bool:
    """A rule accepting everything from the subnet comes before anything that drops."""
    for rule in chain.rules:
        verb = _verb(rule)
        saddr = _SADDR.search(rule)
        if verb == "accept" and saddr and _in_subnet(saddr.group(1), subnet) \
                and not _DPORT.search(rule) and "ct" not in rule.split():
            return True
        if verb in ("drop", "reject"):
            return False
    return chain.policy == "accept"
