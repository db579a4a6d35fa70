"""NCCL_*, TORCH_NCCL_* and *_SOCKET_IFNAME variables: real names, real interfaces."""

from __future__ import annotations

from ddpkit.data.envnames import classify
from ddpkit.i18n import _
from ddpkit.prepare.checks.base import CheckResult, Snapshot, Status

_NCCL_DEBUG_LEVELS = {"VERSION", "WARN", "INFO", "TRACE", "ABORT"}


def judge_name(name: str) -> CheckResult | None:
    """One result for a suspicious NCCL_/TORCH_NCCL_ name, None when it is fine (the verdict is
    data/envnames.py's, shared with lint; the wording is the doctor's)."""
    v = classify(name)
    cid = f"env.{name}"
    if v is None or v.kind == "plugin":  # a network or tuner plugin (OFI, TCPX, SHARP) reads it
        return None
    if v.kind == "renamed":
        new = v.suggestion
        return CheckResult(cid, Status.WARN, _('{name} is the old spelling of {new}').format(name=name, new=new),
                           detail=_('torch reads {new}; the old name is deprecated').format(new=new),
                           hint=f"export {new}=${name}; unset {name}")
    if v.kind == "noop":
        return CheckResult(cid, Status.WARN, _('{name} does nothing: NCCL does not read it').format(name=name),
                           detail=_(v.why),
                           hint=_('unset {name}; set the timeout with init_process_group(timeout=datetime.timedelta(minutes=60))').format(name=name))
    if v.kind == "removed":
        return CheckResult(cid, Status.WARN, _('{name} was removed from NCCL and has no effect').format(name=name),
                           hint=f"unset {name}")
    near = v.suggestion
    summary = (_('{name} is not a variable torch reads') if v.reader == "torch"
               else _('{name} is not a variable NCCL reads')).format(name=name)
    return CheckResult(cid, Status.WARN, summary,
                       detail=_('did you mean {near}?').format(near=near) if near else "",
                       hint=_('export {near}=... instead').format(near=near) if near else f"unset {name}")


def ifname_matches(spec: str, names: list[str]) -> list[str]:
    """Interfaces NCCL would consider for NCCL_SOCKET_IFNAME=spec ('^' excludes, '=' exact)."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    items = [p for p in body.split(",") if p]

    def hit(n: str) -> bool:
        return any(n == p if exact else n.startswith(p) for p in items)

    return [n for n in names if hit(n) != exclude]


def env_vars(s: Snapshot) -> list[CheckResult]:
    results: list[CheckResult] = []
    ifnames = [i.name for i in s.interfaces]
    for name in sorted(s.env):
        if name.startswith(("NCCL_", "TORCH_NCCL_")):
            res = judge_name(name)
            if res:
                results.append(res)
    debug = s.env.get("NCCL_DEBUG")
    if debug and debug.upper() not in _NCCL_DEBUG_LEVELS:
        results.append(CheckResult("env.NCCL_DEBUG", Status.WARN, _('NCCL_DEBUG={debug} is not a level').format(debug=debug),
                                   hint=_('export NCCL_DEBUG=INFO (or WARN, TRACE, VERSION)')))
    spec = s.env.get("NCCL_SOCKET_IFNAME")
    if spec and not [n for n in ifname_matches(spec, ifnames) if n != "lo" or "lo" in spec]:
        results.append(CheckResult(
            "env.NCCL_SOCKET_IFNAME", Status.FAIL,
            _('NCCL_SOCKET_IFNAME={spec} matches no interface here').format(spec=spec),
            detail=_('interfaces: {names}').format(names=', '.join(ifnames)),
            hint=_('export NCCL_SOCKET_IFNAME=<the interface with the cluster address> (ip -br addr)')))
    gloo = s.env.get("GLOO_SOCKET_IFNAME")
    missing = [n for n in (gloo or "").split(",") if n and n not in ifnames]
    if gloo and gloo.startswith(("^", "=")):
        # Gloo compares each comma-separated name exactly (torch ProcessGroupGloo); the '^'
        # exclusion and '=' exact-match prefixes are NCCL_SOCKET_IFNAME syntax only.
        good = [n for n in ifname_matches(gloo, ifnames) if n != "lo"]
        results.append(CheckResult(
            "env.GLOO_SOCKET_IFNAME", Status.FAIL,
            _("GLOO_SOCKET_IFNAME={gloo} uses NCCL's '{gloo2}' syntax, which Gloo does not have").format(gloo=gloo, gloo2=gloo[0]),
            detail=_("Gloo takes exact interface names, comma-separated; '^' (exclude) and '=' (exact) work only in NCCL_SOCKET_IFNAME"),
            hint=_("export GLOO_SOCKET_IFNAME={value} (an exact name; keep the '^...' form for NCCL_SOCKET_IFNAME)").format(value=good[0] if good else _('<the cluster interface>'))))
    elif missing:
        results.append(CheckResult(
            "env.GLOO_SOCKET_IFNAME", Status.FAIL,
            _('GLOO_SOCKET_IFNAME names {missing}, which does not exist here').format(missing=', '.join(missing)),
            detail=_('interfaces: {names}').format(names=', '.join(ifnames)),
            hint=_('export GLOO_SOCKET_IFNAME=<the interface with the cluster address> (exact name)')))
    if not results:
        shown = [n for n in sorted(s.env) if n.startswith(("NCCL_", "TORCH_", "GLOO_"))]
        results.append(CheckResult("env.vars", Status.OK,
                                   _('{n_shown} NCCL/TORCH/GLOO variable(s) set, all known').format(n_shown=len(shown)),
                                   detail=" ".join(shown)))
    return results
