"""Would this host's firewall let a TCP connection to PORT in? Pure functions over tool output.

Each front-end is judged from what it prints: `firewall-cmd --state` + `--list-all`,
`ufw status verbose`, `iptables -S`. The judgement is static (no packet is sent); the
cluster check (`ddpkit check`) confirms it with real connections.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ddpkit.i18n import _

OPEN, BLOCKED, UNKNOWN = "open", "blocked", "unknown"


@dataclass(frozen=True)
class PortVerdict:
    firewall: str  # "firewalld", "ufw", "iptables", "nftables" or "none"
    state: str  # open | blocked | unknown
    detail: str = ""
    action: str = ""  # DROP (silently dropped: peers hang) or REJECT (peers see refused)

    def to_dict(self) -> dict:
        return {"firewall": self.firewall, "state": self.state, "detail": self.detail,
                "action": self.action}


def open_port_command(firewall: str, port: int) -> str:
    """The command that opens PORT/tcp on that firewall, as a user would paste it."""
    return {
        "firewalld": f"sudo firewall-cmd --permanent --add-port={port}/tcp && sudo firewall-cmd --reload",
        "ufw": f"sudo ufw allow {port}/tcp",
        "nftables": f"sudo nft insert rule inet filter input tcp dport {port} accept",
    }.get(firewall, f"sudo iptables -I INPUT -p tcp --dport {port} -j ACCEPT")


def trust_subnet_command(firewall: str, subnet: str) -> str:
    """NCCL and Gloo also use random ports between all nodes: trusting the subnet covers them."""
    return {
        "firewalld": f"sudo firewall-cmd --permanent --zone=trusted --add-source={subnet} && sudo firewall-cmd --reload",
        "ufw": f"sudo ufw allow from {subnet}",
        "nftables": f"sudo nft insert rule inet filter input ip saddr {subnet} accept",
    }.get(firewall, f"sudo iptables -I INPUT -s {subnet} -j ACCEPT")


def _port_in(port: int, spec: str, range_sep: str) -> bool:
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition(range_sep)
        try:
            if sep and int(lo) <= port <= int(hi):
                return True
            if not sep and int(lo) == port:
                return True
        except ValueError:
            continue
    return False


# firewalld's predefined services that matter on training nodes (/usr/lib/firewalld/services).
_SERVICE_PORTS = {"ssh": 22, "http": 80, "https": 443, "jupyterhub": 8000}


# --- firewalld --------------------------------------------------------------------------------

def firewalld_verdict(state: str, list_all: str, port: int) -> PortVerdict | None:
    """None when firewalld is not running (then another front-end decides)."""
    if state.strip() != "running":
        return None
    fields: dict[str, str] = {}
    rich: list[str] = []
    in_rich = False
    for line in list_all.splitlines():
        if in_rich and line.startswith(("\t", "        ")) and "rule" in line:
            rich.append(line.strip())
            continue
        key, sep, value = line.strip().partition(":")
        if sep:
            fields[key.strip()] = value.strip()
            in_rich = key.strip() == "rich rules"
    target = fields.get("target", "default")
    if target.upper() == "ACCEPT":
        return PortVerdict("firewalld", OPEN, _("the active zone's target is ACCEPT"))
    for service in fields.get("services", "").split():
        if _SERVICE_PORTS.get(service) == port:
            return PortVerdict("firewalld", OPEN,
                               _("service '{service}' is open in the active zone").format(
                                   service=service))
    for spec in fields.get("ports", "").split():
        number, _sep, proto = spec.partition("/")
        if proto == "tcp" and _port_in(port, number, "-"):
            return PortVerdict("firewalld", OPEN,
                               _("port {spec} is open in the active zone").format(spec=spec))
    for rule in rich:
        if "accept" in rule and (f'port="{port}"' in rule or ("source address" in rule and "port=" not in rule)):
            return PortVerdict("firewalld", OPEN, _("rich rule allows it: {rule}").format(rule=rule))
    action = "DROP" if target.upper() == "DROP" else "REJECT"
    if list_all.strip():
        zone = list_all.strip().splitlines()[0].split()[0]
        said = _("{port}/tcp is not open in zone '{zone}' (target {target})").format(
            port=port, zone=zone, target=target)
    else:
        said = _("{port}/tcp is not open in the active zone (target {target})").format(
            port=port, target=target)
    return PortVerdict("firewalld", BLOCKED, said, action)


# --- ufw ----------------------------------------------------------------------------------------

_UFW_SPLIT = re.compile(r"\s{2,}")


def ufw_verdict(status: str, port: int) -> PortVerdict | None:
    """None when ufw is inactive."""
    if not re.search(r"^Status:\s*active", status, re.M):
        return None
    default = re.search(r"^Default:\s*(\w+)\s*\(incoming\)", status, re.M)
    policy = default.group(1).lower() if default else "deny"  # ufw's default when not shown
    rows_started = False
    for line in status.splitlines():
        if line.startswith("--"):
            rows_started = True
            continue
        if not rows_started or not line.strip() or "(v6)" in line:
            continue
        cols = _UFW_SPLIT.split(line.strip())
        if len(cols) < 3:
            continue
        to, action, source = cols[0], cols[1].upper(), cols[2]
        if "OUT" in action.split():
            continue
        if not _ufw_to_matches(to, port):
            continue
        if action.startswith("ALLOW") or action.startswith("LIMIT"):
            said = (_("rule '{rule}' allows it") if source.startswith("Anywhere")
                    else _("rule '{rule}' allows it (only from {source})"))
            return PortVerdict("ufw", OPEN, said.format(rule=line.strip(), source=source))
        if action.startswith("DENY") or action.startswith("REJECT"):
            if not source.startswith("Anywhere"):
                continue  # denies only some sources
            act = "DROP" if action.startswith("DENY") else "REJECT"
            return PortVerdict("ufw", BLOCKED, _("rule '{rule}' blocks it").format(
                rule=line.strip()), act)
    if policy == "allow":
        return PortVerdict("ufw", OPEN, _("ufw allows incoming by default"))
    act = "REJECT" if policy == "reject" else "DROP"
    return PortVerdict("ufw", BLOCKED, _("no ufw rule allows {port}/tcp and incoming is "
                                         "'{policy}'").format(port=port, policy=policy), act)


def _ufw_to_matches(to: str, port: int) -> bool:
    to = to.split(" on ")[0].strip()
    if to.startswith("Anywhere"):
        return True
    spec, _, proto = to.partition("/")
    if proto and proto != "tcp":
        return False
    return _port_in(port, spec, ":")


# --- iptables -----------------------------------------------------------------------------------

def parse_iptables_s(text: str) -> tuple[dict[str, str], dict[str, list[list[str]]]]:
    """`iptables -S` -> (chain policies, chain -> rules as token lists)."""
    policies: dict[str, str] = {}
    chains: dict[str, list[list[str]]] = {}
    for line in text.splitlines():
        try:
            tokens = shlex.split(line)
        except ValueError:
            continue
        if len(tokens) >= 3 and tokens[0] == "-P":
            policies[tokens[1]] = tokens[2]
            chains.setdefault(tokens[1], [])
        elif len(tokens) >= 2 and tokens[0] == "-N":
            chains.setdefault(tokens[1], [])
        elif len(tokens) >= 2 and tokens[0] == "-A":
            chains.setdefault(tokens[1], []).append(tokens[2:])
    return policies, chains


_IGNORED_OPTS = {"-m", "--match", "--comment", "--dst-type", "--src-type", "--reject-with",
                 "--log-prefix", "--log-level", "--set-xmark", "--icmp-type", "-c", "--limit",
                 "--limit-burst"}


def _rule_match(rule: list[str], port: int) -> tuple[bool, str]:
    """(applies to a new TCP connection to PORT from another host?, 'partial' note)."""
    note = ""
    i, negate = 0, False
    while i < len(rule):
        opt = rule[i]
        val = rule[i + 1] if i + 1 < len(rule) else ""
        if opt == "!":
            negate, i = True, i + 1
            continue
        if opt in ("-j", "--jump", "-g", "--goto"):
            break
        hit: bool | None = None
        if opt in ("-p", "--protocol"):
            hit = val.lower() in ("tcp", "6", "all")
        elif opt in ("-i", "--in-interface"):
            hit = not val.startswith("lo")
        elif opt in ("--dport", "--destination-port", "--dports", "--destination-ports"):
            hit = _port_in(port, val, ":")
        elif opt in ("--state", "--ctstate"):
            hit = "NEW" in val.split(",") or "UNTRACKED" in val.split(",")
        elif opt == "--tcp-flags":  # MASK COMP: "SYN" alone in COMP selects new connections
            comp = rule[i + 2].split(",") if i + 2 < len(rule) else []
            hit = "SYN" in comp and "ACK" not in comp
            if negate:
                hit = not hit
            if not hit:
                return False, ""
            negate, i = False, i + 3
            continue
        elif opt == "--syn":
            hit, i = (not negate), i + 1
            negate = False
            if not hit:
                return False, ""
            continue
        elif opt in ("-s", "--source", "-d", "--destination", "--match-set", "--src-range"):
            whole = val in ("0.0.0.0/0", "::/0")
            loop = val.startswith("127.")
            hit = whole or not loop
            if not whole and not loop and not negate:
                note = f"{opt} {val}"
            if opt == "--match-set":
                i += 1  # set name, then direction flags
        elif opt in ("--sport", "--source-port", "--sports", "-o", "--out-interface"):
            return False, ""  # not about inbound connections to our port
        elif opt in _IGNORED_OPTS:
            hit = None
        elif opt.startswith("-"):
            return False, ""  # a match we do not understand: do not let it decide
        if hit is not None:
            if negate:
                hit = not hit
            if not hit:
                return False, ""
        negate = False
        i += 2 if opt.startswith("-") else 1
    return True, note


def _target(rule: list[str]) -> str:
    for flag in ("-j", "--jump", "-g", "--goto"):
        if flag in rule:
            idx = rule.index(flag)
            return rule[idx + 1] if idx + 1 < len(rule) else ""
    return ""


def _walk(chains: dict[str, list[list[str]]], chain: str, port: int, depth: int = 0):
    if depth > 20:
        return None
    for rule in chains.get(chain, []):
        applies, note = _rule_match(rule, port)
        if not applies:
            continue
        target = _target(rule)
        if target in ("ACCEPT", "DROP", "REJECT"):
            if note and target != "ACCEPT":
                continue  # blocks only some sources; not a verdict for the cluster
            return target, chain, rule, note
        if target == "RETURN":
            return None
        if target in chains:
            found = _walk(chains, target, port, depth + 1)
            if found:
                return found
    return None


def iptables_verdict(rules: str, port: int) -> PortVerdict | None:
    """None when there are no rules at all to judge."""
    policies, chains = parse_iptables_s(rules)
    if "INPUT" not in policies:
        return None
    found = _walk(chains, "INPUT", port)
    if found:
        target, chain, rule, note = found
        shown = shlex.join(["-A", chain, *rule])
        if target == "ACCEPT":
            said = _("'{rule}' accepts it (only {note})") if note else _("'{rule}' accepts it")
            return PortVerdict("iptables", OPEN, said.format(rule=shown, note=note))
        said = _("'{rule}' drops it") if target == "DROP" else _("'{rule}' rejects it")
        return PortVerdict("iptables", BLOCKED, said.format(rule=shown), target)
    policy = policies["INPUT"]
    if policy == "ACCEPT":
        if not chains.get("INPUT"):
            return None  # an empty ACCEPT table says nothing: nftables may still filter
        return PortVerdict("iptables", OPEN, _("no INPUT rule matches and the policy is ACCEPT"))
    return PortVerdict("iptables", BLOCKED, _("no INPUT rule accepts {port}/tcp and the policy is "
                                              "{policy}").format(port=port, policy=policy), policy)


# --- nftables (only what iptables does not show) --------------------------------------------

_NFT_INPUT = re.compile(r"hook input priority [^;]+;\s*policy (?P<policy>\w+);")


def nft_verdict(ruleset: str, port: int) -> PortVerdict | None:
    """Pure-nftables rules are too varied to judge exactly; flag input chains that drop."""
    policies = [m.group("policy") for m in _NFT_INPUT.finditer(ruleset)]
    if not policies:
        return None
    if all(p == "accept" for p in policies) and not re.search(r"\b(drop|reject)\b", ruleset):
        return PortVerdict("nftables", OPEN, _("nftables input chains accept by default"))
    if re.search(rf"tcp dport (\{{[^}}]*\b{port}\b[^}}]*\}}|{port})\s+(counter\s+)?accept", ruleset):
        return PortVerdict("nftables", OPEN, _("an nftables rule accepts tcp dport {port}").format(
            port=port))
    return PortVerdict("nftables", UNKNOWN,
                       _("nftables input chains drop or reject some traffic; no rule for this "
                         "port was found"),
                       "DROP")


def judge_port(outputs: dict[str, str], port: int) -> PortVerdict:
    """Combine the front-ends in the order they take precedence on a real host."""
    for verdict in (
        firewalld_verdict(outputs.get("firewalld_state", ""), outputs.get("firewalld_list", ""), port),
        ufw_verdict(outputs.get("ufw", ""), port),
        iptables_verdict(outputs.get("iptables", ""), port),
        nft_verdict(outputs.get("nft", ""), port),
    ):
        if verdict is not None:
            return verdict
    return PortVerdict("none", OPEN, _("no active firewall found"))
