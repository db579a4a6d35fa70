"""Rules about how a script gets its rank, device, launcher, data and environment."""

from __future__ import annotations

import ast
import re

from ddpkit.i18n import N_, _
from ddpkit.troubleshoot.lint import Finding, make, twin
from ddpkit.troubleshoot.lint.pyfacts import Script, env_names

GLOBAL_ENV = {"RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
              "MV2_COMM_WORLD_SIZE", "JSM_NAMESPACE_RANK", "JSM_NAMESPACE_SIZE", "NODE_RANK",
              "GROUP_RANK", "SLURM_NODEID"}
LOCAL_ENV = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
             "LOCAL_WORLD_SIZE", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"}
_GLOBAL_CALLS = ("get_rank", "get_world_size", "rank", "size", "get_global_rank", "process_index",
                 "num_processes", "cross_rank", "world_size")
BAD = ("cli", "env_local", "device_count")
LOCAL_FLAGS = ("--local_rank", "--local-rank", "--local_rank=", "-local_rank")


def spawns(s: Script) -> bool:
    """The script starts its own processes: their rank is the process index, set by the code."""
    return any(q.rsplit(".", 1)[-1] in ("spawn", "start_processes", "Process", "Pool")
               and ("multiprocessing" in q or q.startswith(("mp.", "torch.mp")))
               for _unused, q in s.calls)


def classify(s: Script, expr: ast.expr, depth: int = 0) -> list[tuple[str, ast.AST]]:
    """Where a rank/world-size value comes from: [(category, origin node)]."""
    if depth > 4 or expr is None:
        return []
    envs = env_names(expr)
    if envs:
        if any(e in GLOBAL_ENV for e in envs):
            return [("env_global", expr)]
        return [("env_local" if any(e in LOCAL_ENV for e in envs) else "unknown", expr)]
    if isinstance(expr, ast.Call):
        q = s.qual(expr.func)
        name = q.rsplit(".", 1)[-1]
        if name == "device_count":
            return [("device_count", expr)]
        if name in ("local_rank", "local_size", "local_process_index"):
            return [("env_local", expr)]
        if name in _GLOBAL_CALLS:
            return [("env_global", expr)]
        out = []
        for a in list(expr.args) + [k.value for k in expr.keywords]:
            out += classify(s, a, depth + 1)
        return out
    if isinstance(expr, ast.Subscript) and s.qual(expr.value) == "sys.argv":
        return [("cli", expr)]
    if isinstance(expr, ast.Attribute) and not isinstance(expr.value, ast.Call):
        return _attribute(s, expr, depth)
    if isinstance(expr, ast.Name):
        return _name(s, expr, depth)
    out = []
    for child in ast.iter_child_nodes(expr):
        if isinstance(child, ast.expr):
            out += classify(s, child, depth + 1)
    return out


def _attribute(s: Script, expr: ast.Attribute, depth: int) -> list[tuple[str, ast.AST]]:
    assigned = s.attr_assigns.get(expr.attr, [])
    out = []
    for node, val in assigned:
        if node is not s.stmt_of(expr):
            out += classify(s, val, depth + 1)
    if out:
        return out
    for node, val in s.assigns.get(expr.attr, []):  # a class attribute: Utils.rank
        if isinstance(s.parent.get(node), ast.ClassDef):
            out += classify(s, val, depth + 1)
    if out:
        return out
    opt = s.options.get(expr.attr)
    if opt is not None:
        default = s.kw(opt, "default")
        if default is not None and env_names(default):
            return classify(s, default, depth + 1)
        return [("cli", expr)]
    return []


def _name(s: Script, expr: ast.Name, depth: int) -> list[tuple[str, ast.AST]]:
    fn = s.func_of(expr)
    out = []
    for node, val in s.assigns.get(expr.id, []):
        if s.func_of(node) in (fn, None) and node.lineno <= expr.lineno:
            out = [(c, o) for c, o in classify(s, val, depth + 1)] or out
    if out or fn is None:
        return out
    params = [a.arg for a in fn.args.args]
    if expr.id not in params:
        return []
    idx = params.index(expr.id)
    for call in s.callers(fn.name):
        offset = 1 if params and params[0] in ("self", "cls") and isinstance(
            call.func, ast.Attribute) else 0
        arg = s.arg(call, idx - offset, expr.id)
        if arg is not None:
            out += classify(s, arg, depth + 1)
    return out


def _verdict(cats: list[tuple[str, ast.AST]]) -> tuple[str, ast.AST] | None:
    if not cats or any(c == "env_global" for c, _unused in cats):
        return None
    for bad in BAD:
        for c, node in cats:
            if c == bad:
                return c, node
    return None


_SOURCE_TEXT = {"cli": N_("the script's arguments"),  # translated where shown
                "env_local": N_("LOCAL_RANK (the rank on this node)"),
                "device_count": N_("torch.cuda.device_count() (the GPUs of one node)")}


def rank_from_args(s: Script) -> list[Finding]:
    if spawns(s):
        return []
    out = []
    inits = s.calls_to("init_process_group")
    # the diff only for env:// rendezvous (what torchrun and friends set up)
    env_based = all(s.arg(c, 1, "init_method") is None
                    or "env://" in ast.unparse(s.arg(c, 1, "init_method")) for c in inits)
    sites = [(c, 4, 3) for c in inits]
    sites += [(c, 2, 1) for c in s.calls_to("DistributedSampler")]
    out += _env_written(s)
    for call, rank_pos, ws_pos in sites:
        for role, pos in (("rank", rank_pos), ("world_size", ws_pos)):
            if role == "world_size" and call in s.calls_to("DistributedSampler"):
                role = "num_replicas"
            expr = s.arg(call, pos, role)
            found = _verdict(classify(s, expr)) if expr is not None else None
            if not found:
                continue
            cat, node = found
            out.append(_rank_finding(s, node, role, cat, env_based))
            out += _rank_twins(s, node, expr, cat, role)
    return out


def _env_written(s: Script) -> list[Finding]:
    """os.environ["RANK"] = str(args.rank): env:// then reads the script's argument."""
    out = []
    for key, _role in (("RANK", "rank"), ("WORLD_SIZE", "world_size")):
        for node, val in s.attr_assigns.get(f"os.environ['{key}']", []) + s.attr_assigns.get(
                f'os.environ["{key}"]', []):
            found = _verdict(classify(s, val))
            if found:
                out.append(make(s.path, node.lineno, "rank_from_args",
                                _('{key} is set from {source_text}: {unparse}').format(key=key, source_text=_(_SOURCE_TEXT[found[0]]), unparse=ast.unparse(val)[:50])))
    return out


def _rank_twins(s: Script, origin: ast.AST, use: ast.expr, cat: str, role: str) -> list[Finding]:
    """The same mistake shown where a reader may look for it: where the value enters
    init_process_group/DistributedSampler, and the --rank option the value comes from."""
    lines = {origin.lineno}
    out = []
    if abs(use.lineno - origin.lineno) > 2:
        lines.add(use.lineno)
        out.append(twin(s.path, use.lineno, "rank_from_args",
                        _('{role} here is the value taken at line {lineno}').format(role=role, lineno=origin.lineno),
                        origin.lineno))
    if cat == "cli" and isinstance(origin, ast.Attribute) and origin.attr in s.options:
        opt = s.options[origin.attr].lineno
        if all(abs(opt - x) > 2 for x in lines):
            out.append(twin(s.path, opt, "rank_from_args",
                            _('the script takes --{attr} from its command line').format(attr=origin.attr),
                            origin.lineno))
    return out


def _rank_finding(s: Script, node: ast.AST, role: str, cat: str, env_based: bool) -> Finding:
    env = "RANK" if role == "rank" else "WORLD_SIZE"
    edits = ()
    if env_based and isinstance(node, ast.expr) and node.lineno == node.end_lineno:
        edits = ((node.lineno, node.col_offset, node.end_col_offset,
                  f'int(os.environ["{env}"])'),) + _need_os(s)
    return make(s.path, node.lineno, "rank_from_args",
                _('{role} comes from {source_text}: {unparse}').format(role=role, source_text=_(_SOURCE_TEXT[cat]), unparse=ast.unparse(node)[:60]), edits=edits)


def _need_os(s: Script) -> tuple:
    if "os" in s.aliases:
        return ()
    first = next((n for n in s.tree.body if isinstance(n, (ast.Import, ast.ImportFrom))), None)
    at = first.lineno if first else 1
    return ((at, at - 1, "import os"),)


def deprecated_launcher(s: Script) -> list[Finding]:
    if "torch.distributed" not in s.text:
        return []
    out = []
    for node in s.nodes:
        if isinstance(node, ast.Import) and any(a.name == "torch.distributed.launch"
                                                 for a in node.names):
            out.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and (
                node.module == "torch.distributed.launch" or node.module == "torch.distributed"
                and any(a.name == "launch" for a in node.names)):
            out.append(node.lineno)
    out += [c.lineno for c in s.strings if c.value.strip() == "torch.distributed.launch"]
    pat = re.compile(r"-m\s+torch\.distributed\.launch\b")
    out += [i for i, line in enumerate(s.lines, 1) if pat.search(line)]
    return [make(s.path, n, "deprecated_launcher", _('torch.distributed.launch is used'))
            for n in sorted(set(out))]


def local_rank_arg(s: Script) -> list[Finding]:
    # the deepspeed launcher passes --local_rank (torchrun does not): a warning there
    severity = "warn" if s.imports("deepspeed") else ""
    reads_env = any(n in LOCAL_ENV for n in s.tree_env)
    used = any(isinstance(n, ast.Attribute) and n.attr in ("local_rank",)
               and isinstance(n.ctx, ast.Load) for n in s.nodes)
    out = []
    for call, q in s.calls:
        if not q.endswith("add_argument"):
            continue
        flags = [a.value for a in call.args if isinstance(a, ast.Constant)]
        if not any(f in LOCAL_FLAGS for f in flags):
            continue
        default = s.kw(call, "default")
        required = s.kw(call, "required")
        is_required = isinstance(required, ast.Constant) and required.value is True
        if default is not None and env_names(default):
            continue
        if not is_required and (reads_env or not used):
            continue  # only absorbs the launcher's argument; the code reads LOCAL_RANK
        out.append(make(s.path, call.lineno, "local_rank_arg",
                        (_('required option {flags} and no LOCAL_RANK read') if is_required
                         else _('option {flags} and no LOCAL_RANK read')).format(flags=flags[0]), edits=_local_rank_edit(s, call),
                        severity=severity))
    return out


def _local_rank_edit(s: Script, call: ast.Call) -> tuple:
    stmt = s.stmt_of(call)
    if not isinstance(stmt, ast.Expr) or stmt.value is not call:
        return ()
    first = s.lines[stmt.lineno - 1]
    indent = first[:len(first) - len(first.lstrip())]
    recv = ast.unparse(call.func)
    keep = [k for k in call.keywords if k.arg == "help"]
    extra = "".join(f", help={ast.unparse(k.value)}" for k in keep)
    old = s.kw(call, "default")
    fallback = ast.unparse(old) if old is not None and not (
        isinstance(old, ast.Constant) and old.value is None) else "0"  # keep what it meant
    new = (f'{indent}{recv}("--local_rank", "--local-rank", type=int,\n{indent}    '
           f'default=int(os.environ.get("LOCAL_RANK", {fallback})){extra})')
    return ((stmt.lineno, stmt.end_lineno, new),) + _need_os(s)


def fake_nccl_env(s: Script) -> list[Finding]:
    from ddpkit.troubleshoot.lint.envnames import judge

    out = []
    pat = re.compile(r"(?<![A-Z0-9_$])(NCCL_[A-Z0-9_]*[A-Z0-9])(?=\s*=|$)")
    for c in s.strings:
        for m in pat.finditer(c.value.strip()):
            verdict = judge(m.group(1))
            if verdict:
                sev, text = verdict
                out.append(make(s.path, c.lineno, "fake_nccl_env", text, severity=sev))
    return out


def no_destroy(s: Script) -> list[Finding]:
    inits = s.calls_to("init_process_group")
    if not inits or s.calls_to("destroy_process_group") or s.managed():
        return []
    return [make(s.path, inits[0].lineno, "no_destroy",
                 _('init_process_group is called, destroy_process_group never'))]


def no_set_device(s: Script) -> list[Finding]:
    """No torch.cuda.set_device: a warning when nothing else pins the GPU either, a note when
    DDP's device_ids does (collectives outside DDP and NCCL's own setup still use cuda:0)."""
    from ddpkit.troubleshoot.lint.pysync import backend_of

    if s.managed():
        return []
    inits = [c for c in s.calls_to("init_process_group", "init")
             if s.qual(c.func).startswith(("torch.distributed", "horovod"))
             or s.qual(c.func) == "init_process_group"]
    wrappers = s.calls_to("DistributedDataParallel", "FullyShardedDataParallel")
    # GPU evidence: .cuda(), a "cuda..." device string, or the NCCL backend (DDP alone is not:
    # Gloo DDP on CPUs needs no device)
    placed = bool(s.calls_to("cuda") or any(c.value.startswith("cuda") for c in s.strings))
    nccl = any(backend_of(s, c) == "nccl" for c in inits)
    pinned_by_ddp = any(s.kw(w, "device_ids") is not None or s.kw(w, "device_id") is not None
                        or len(w.args) > 1 for w in wrappers)  # device_ids: a GPU model too
    if not (inits or wrappers) or not (placed or nccl or pinned_by_ddp) or _device_pinned(
            s, inits):
        return []
    weak = pinned_by_ddp or not placed
    anchor = inits[0] if inits else wrappers[0]  # set_device goes right after the init
    msg = (_("no torch.cuda.set_device(local_rank) (DDP device_ids pins the model only)")
           if pinned_by_ddp else
           _("no torch.cuda.set_device(local_rank) and no DDP device_ids: every rank starts on "
             "cuda:0"))
    out = [make(s.path, anchor.lineno, "no_set_device", msg, severity="info" if weak else "")]
    for w in wrappers[:1]:  # also at the DDP that has no device_ids
        if not pinned_by_ddp and abs(w.lineno - anchor.lineno) > 2:
            out.append(twin(s.path, w.lineno, "no_set_device", _('DDP without device_ids'),
                            anchor.lineno))
    device = _device_line(s)
    if device and abs(device - anchor.lineno) > 2:  # also where the device is worked out
        out.append(twin(s.path, device, "no_set_device",
                        _('the device is chosen here but never made current (set_device)'),
                        anchor.lineno))
    return out


def _device_line(s: Script) -> int | None:
    """The first line that builds this process's CUDA device from its local rank."""
    for node, val in ((n, v) for pairs in s.assigns.values() for n, v in pairs):
        text = ast.unparse(val) if isinstance(val, (ast.Call, ast.JoinedStr)) else ""
        if "cuda" in text and any(w in text.lower() for w in ("local_rank", "gpu", "rank")):
            return node.lineno
    return None


def _device_pinned(s: Script, inits: list[ast.Call]) -> bool:
    for _c, q in s.calls:
        if q.endswith(("set_device", "cuda.device", "set_default_device", "device_index",
                       "set_device_index")):
            return True
    if any("CUDA_VISIBLE_DEVICES" in k for k in s.attr_assigns):
        return True
    return any(s.kw(c, "device_id") is not None for c in inits)
