"""Rules about what every rank must do together: collectives, saving, samplers, backend, master."""

from __future__ import annotations

import ast
import re

from ddpkit.i18n import _
from ddpkit.troubleshoot.lint import Finding, make, twin
from ddpkit.troubleshoot.lint.pyfacts import FACTORIES, Script, rankish, words

_BARRIERS = {"barrier", "monitored_barrier", "wait_for_everyone"}
_WRAPPERS = ("DistributedDataParallel", "FullyShardedDataParallel", "prepare", "prepare_model")
# helpers that wrap a model in DDP/FSDP (ddp_wrap, create_ddp_model, wrap_fsdp, ...)
_WRAPPER_WORDS = ("ddp", "fsdp", "distributeddataparallel")
# functions of other modules that run a model forward when given one
_FORWARD_WORDS = ("eval", "valid", "test", "predict", "infer", "generate", "sample", "forward",
                  "score", "metric", "accuracy")
_SAVER_WORDS = ("save", "checkpoint", "ckpt", "dump", "export", "snapshot")


def _model_like(name: str) -> bool:
    low = name.lower()
    return low in ("model", "net", "network", "ddp_model", "policy") or low.endswith("_model")


def ddp_names(s: Script) -> set[str]:
    """Names bound to a DDP/FSDP-wrapped model (their forward is a collective)."""
    out = set()
    for name, pairs in s.assigns.items():
        for _unused, val in pairs:
            last = s.qual(val.func).rsplit(".", 1)[-1] if isinstance(val, ast.Call) else ""
            low = last.lower()
            if last and any(w in low for w in _WRAPPER_WORDS) and "unwrap" not in low \
                    and s.functions.get(last) is None and (low in _WRAPPER_WORDS or any(
                        v in low for v in ("wrap", "model", "create", "make", "build", "to_"))):
                out.add(name)
                continue
            if isinstance(val, ast.Call) and last in _WRAPPERS:
                if s.qual(val.func).endswith("prepare") and "accelerator" not in \
                        s.qual(val.func).lower():
                    continue
                out.add(name)
    return out


class Reach:
    """Which same-file functions reach a collective (directly, through a DDP model, or by call)."""

    def __init__(self, s: Script) -> None:
        self.s, self.ddp, self.memo = s, ddp_names(s), {}
        # A file that wraps models in DDP somewhere: a `model` handed around as a parameter may
        # be the wrapped one; only used when the callee really runs the model's forward.
        self.maybe_ddp = bool(self.ddp or "distributeddataparallel" in s.tree_words)
        self.last_no_grad = False

    def call(self, call: ast.Call, q: str) -> str:
        """What collective a call is or reaches ('' for none)."""
        s = self.s
        if s.is_collective(call, q):
            return q.rsplit(".", 1)[-1]
        text = ast.unparse(call.func)
        if text in self.ddp:
            return "DDP forward (no_grad)" if s.no_grad(call) else "DDP forward"
        name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(
            call.func, "id", "")
        fn = s.target(call)
        if fn is None:
            return "" if name in s.functions else self._external(call, name)
        if self.function(fn):
            return f"{name}() -> {self.function(fn)}"
        params = [a.arg for a in fn.args.args]
        offset = 1 if params[:1] == ["self"] and isinstance(call.func, ast.Attribute) else 0
        passed = [(params[i + offset], a) for i, a in enumerate(call.args) if i + offset < len(
            params)] + [(k.arg, k.value) for k in call.keywords if k.arg in params]
        for param, a in passed:
            if not isinstance(a, (ast.Name, ast.Attribute)):
                continue
            text = ast.unparse(a)
            if text in self.ddp:
                self.last_no_grad = False
                if self._forwards(fn, param, 0) or any(w in name.lower() for w in _FORWARD_WORDS):
                    quiet = " (no_grad)" if self.last_no_grad or s.no_grad(call) else ""
                    return f"{name}() -> DDP forward of {text}{quiet}"
            elif self.maybe_ddp and isinstance(a, ast.Name) and _model_like(a.id) \
                    and self._forwards(fn, param, 0) and not self._unwrapped(a, call):
                return f"{name}() -> forward of {text} (if it is the DDP-wrapped model)"
        return ""

    def _unwrapped(self, a: ast.Name, call: ast.Call) -> bool:
        """The name was last bound to model.module / unwrap(model) in this function."""
        fn = self.s.func_of(call)
        for node, val in self.s.assigns.get(a.id, []):
            if self.s.func_of(node) is fn and "module" in words(val) + [
                    w for w in words(val) if "unwrap" in w]:
                return True
        return False

    def _forwards(self, fn, param: str, depth: int) -> bool:
        """Does fn call its parameter `param` (a model), directly or through helpers?"""
        for sub in ast.walk(fn):
            if not isinstance(sub, ast.Call):
                continue
            if isinstance(sub.func, ast.Name) and sub.func.id == param:
                self.last_no_grad = self.s.no_grad(sub)
                return True
            args = [a for a in sub.args if isinstance(a, ast.Name) and a.id == param]
            if not args or depth >= 3:
                continue
            name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(
                sub.func, "id", "")
            inner = self.s.target(sub)
            if inner is None:
                if any(w in name.lower() for w in _FORWARD_WORDS):
                    return True
                continue
            i = sub.args.index(args[0])
            inner_params = [a.arg for a in inner.args.args]
            if i < len(inner_params) and self._forwards(inner, inner_params[i], depth + 1):
                return True
        return False

    def _external(self, call: ast.Call, name: str) -> str:
        """A function of another module given the DDP model: evaluate(model, ...) runs its
        forward (a collective) when the name says it evaluates or generates."""
        if not any(w in name.lower() for w in _FORWARD_WORDS):
            return ""
        for a in list(call.args) + [k.value for k in call.keywords]:
            if isinstance(a, (ast.Name, ast.Attribute)) and ast.unparse(a) in self.ddp:
                return f"{name}() -> DDP forward of {ast.unparse(a)}"
        return ""

    def function(self, fn) -> str:
        if fn in self.memo:
            return self.memo[fn]
        self.memo[fn] = ""
        local = self.s.local_names(fn)
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Call) and sub is not fn:
                q = self.s.qual(sub.func)
                text = ast.unparse(sub.func)
                if text in self.ddp and text in local:
                    continue  # a local of the same name is not the wrapped model
                got = self.call(sub, q)
                if got:
                    self.memo[fn] = got
                    return got
        return ""


def rank0_collective_desync(s: Script) -> list[Finding]:
    reach = Reach(s)
    sites = []
    for call, q in s.calls:
        what = reach.call(call, q)
        pol = s.guard(call) if what else None
        if pol:
            sites.append((call, pol, what, s.func_of(call)))
    paired = set()
    for call, pol, what, fn in sites:
        for _other, pol2, what2, fn2 in sites:
            if fn is fn2 and what == what2 and pol != pol2:
                paired.add(call)  # "rank 0 first": others wait before, rank 0 after
    out = []
    for call, pol, what, _unused in sites:
        if call in paired:
            continue
        # An explicit collective always hangs. A DDP forward syncs buffers with grad enabled (a
        # warning); under no_grad it syncs nothing since torch 1.9 (a note), and so is a model
        # only guessed to be the wrapped one.
        quiet = "(no_grad)" in what or s.no_grad(call) or "if it is the DDP" in what
        severity = "" if "forward" not in what else ("info" if quiet else "warn")
        out.append(make(s.path, call.lineno, "rank0_collective_desync",
                        (_('{what} runs on rank 0 only; the other ranks never join') if pol == "zero"
                         else _('{what} runs on every rank but 0; the other ranks never join')).format(
                             what=shown(what)),
                        severity=severity))
    return out


# The end of a call chain as Reach words it ("f() -> g() -> DDP forward of model (no_grad)"):
# the calls are code; the words after the last arrow get a whole message each where shown.
_TAIL = re.compile(r"^(?P<chain>(?:.*? -> )?)(?:DDP forward(?: of (?P<ddp>.+?))?(?P<ng> \(no_grad\))?"
                   r"|forward of (?P<maybe>.+?) \(if it is the DDP-wrapped model\))$")


def shown(what: str) -> str:
    """Reach's description of a call chain in the user's language."""
    m = _TAIL.match(what)
    if not m:
        return what  # a collective's own name: code
    if m.group("maybe"):
        tail = _("forward of {model} (if it is the DDP-wrapped model)").format(
            model=m.group("maybe"))
    elif m.group("ddp"):
        tail = (_("DDP forward of {model} (no_grad)") if m.group("ng")
                else _("DDP forward of {model}")).format(model=m.group("ddp"))
    else:
        tail = _("DDP forward (no_grad)") if m.group("ng") else _("DDP forward")
    return m.group("chain") + tail


_MEMORY = ("bytesio", "stringio", "buffer", "buf", "mem_file", "stream", "temporaryfile")


def _sharded(s: Script, call: ast.Call) -> bool:
    """Each rank writes its own file (the path names the rank), or no shared file at all
    (torch.save into io.BytesIO)."""
    path = s.arg(call, 1, "f")
    if path is None:
        return False
    if rankish(path) or any(m in w for w in words(path) for m in _MEMORY):
        return True
    if isinstance(path, ast.Name):
        return any(rankish(v) or any(m in w for w in words(v) for m in _MEMORY)
                   for _unused, v in s.assigns.get(path.id, []))
    return False


def unguarded_save(s: Script) -> list[Finding]:
    multi = ("accelerate", "lightning", "pytorch_lightning", "deepspeed", "horovod")
    if not (s.distributed() or any(s.imports(m) for m in multi)):
        return []
    if {"sharded_state_dict", "local_state_dict"} & s.tree_words:
        return []
    out = []
    for call, q in s.calls:
        if q not in ("torch.save", "save") or (q == "save" and s.aliases.get("save") !=
                                                "torch.save"):
            continue
        if s.guard(call) or _sharded(s, call):
            continue
        out += _save_sites(s, call)
    return out


def _save_sites(s: Script, call: ast.Call) -> list[Finding]:
    fn = s.func_of(call)
    msg = _("torch.save runs on every rank")
    if fn is None:
        return [make(s.path, call.lineno, "unguarded_save", msg)]
    callers = [c for c in s.callers(fn.name) if s.func_of(c) is not fn]
    if not callers:
        # an entry point, a function passed along (mp.spawn(train, ...)), or a method the
        # script's caller uses: nothing here restricts it to one rank
        return [make(s.path, call.lineno, "unguarded_save", msg)]
    open_callers = [c for c in callers if not s.guard(c) and not _caller_guarded(s, c)]
    if not open_callers:
        return []
    out = [make(s.path, call.lineno, "unguarded_save", msg)]
    saver = any(w in fn.name.lower() for w in _SAVER_WORDS) or len(fn.body) <= 6
    if saver:  # the fix may go at the call as well: report where it is called on every rank
        out += [twin(s.path, c.lineno, "unguarded_save",
                     _('{name}() saves with torch.save and is called on every rank').format(name=fn.name),
                     call.lineno) for c in open_callers]
    return out


def _caller_guarded(s: Script, call: ast.Call) -> bool:
    """The caller's own function is only ever called under a rank guard."""
    fn = s.func_of(call)
    if fn is None:
        return False
    callers = s.callers(fn.name)
    return bool(callers) and all(s.guard(c) for c in callers)


def backend_of(s: Script, call: ast.Call) -> str:
    """'nccl' when the init call's backend can only be NCCL, else ''."""
    expr = s.arg(call, 0, "backend")
    if expr is None:
        return ""
    vals = [expr]
    if isinstance(expr, ast.Name):
        vals = [v for _unused, v in s.assigns.get(expr.id, [])] or [expr]
    elif isinstance(expr, ast.Attribute) and expr.attr in s.options:
        default = s.kw(s.options[expr.attr], "default")  # --dist-backend default 'nccl'
        vals = [default] if default is not None else [expr]
    texts = set()
    for v in vals:
        if isinstance(v, ast.Constant) and isinstance(v.value, str):
            texts.add(v.value.lower())
        elif isinstance(v, ast.Attribute) and v.attr.lower() == "nccl":
            texts.add("nccl")
        else:
            return ""
    return "nccl" if texts == {"nccl"} else ""


def nccl_on_cpu(s: Script) -> list[Finding]:
    inits = [c for c in s.calls_to("init_process_group") if backend_of(s, c) == "nccl"]
    if not inits:
        return []
    out = []
    if _cpu_fallback(s):  # a note: most such scripts only ever run on GPU nodes
        out.append(make(s.path, inits[0].lineno, "nccl_on_cpu",
                        _("backend 'nccl' is fixed, yet the script falls back to the CPU without a GPU"), severity="info"))
    if any(s.kw(c, "backend") is not None for c in s.calls_to("new_group")):
        return out
    for call, q in s.calls:
        if s.is_collective(call, q) and q.startswith("torch.distributed") and call.args:
            if _on_cpu(s, call.args[0], call):
                out.append(make(s.path, call.lineno, "nccl_on_cpu",
                                _('{rsplit} of a CPU tensor on the NCCL backend').format(rsplit=q.rsplit('.', 1)[-1])))
                made = _made_at(s, call.args[0], call)
                if made and abs(made - call.lineno) > 2:  # where the tensor is made on the CPU
                    out.append(twin(s.path, made, "nccl_on_cpu",
                                    _('this tensor is made on the CPU, then used in a collective'),
                                    call.lineno))
    return out


def _made_at(s: Script, arg: ast.expr, call: ast.Call) -> int | None:
    if not isinstance(arg, ast.Name):
        return None
    fn = s.func_of(call)
    lines = [n.lineno for n, _unused in s.assigns.get(arg.id, []) if s.func_of(n) is fn
             and n.lineno < call.lineno]
    return max(lines) if lines else None


def _cpu_fallback(s: Script) -> bool:
    for node in s.nodes:
        if isinstance(node, ast.IfExp) and "is_available" in words(node.test):
            if "cpu" in words(node.body) + words(node.orelse):
                return True
    return False


def _on_cpu(s: Script, arg: ast.expr, call: ast.Call) -> bool:
    vals = [arg]
    if isinstance(arg, ast.Name):
        fn = s.func_of(call)
        vals = [v for n, v in s.assigns.get(arg.id, []) if s.func_of(n) is fn]
        if not vals:
            return False
    for v in vals:
        if not isinstance(v, ast.Call):
            return False
        q = s.qual(v.func)
        name = q.rsplit(".", 1)[-1]
        device = s.kw(v, "device")
        if name in ("cuda", "to") or (device is not None and not (
                isinstance(device, ast.Constant) and device.value == "cpu")):
            return False
        if not (name == "cpu" or (name in FACTORIES and q.startswith("torch"))):
            return False
        if name in ("zeros_like", "ones_like"):
            return False
    return True


_LOOP = re.compile(r"^(tcp://)?(127\.0\.0\.1|localhost)\b")
_NODE_WORDS = ("nnodes", "num_nodes", "node_rank", "nodes", "n_nodes", "num_machines",
               "machine_rank", "nr", "node_num", "world_nodes")


def multi_node(s: Script) -> bool:
    if any(d.lower() in _NODE_WORDS or "node" in d.lower() for d in s.options):
        return True
    return any(e in ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "SLURM_NNODES",
                     "SLURM_JOB_NUM_NODES", "NNODES", "NUM_NODES") for e in s.tree_env)


def loopback_master(s: Script) -> list[Finding]:
    if not multi_node(s):
        return []
    out = []
    for c in s.strings:
        val = c.value.strip()
        if not _LOOP.match(val):
            continue
        parent = s.parent.get(c)
        if isinstance(parent, ast.JoinedStr):
            parent = s.parent.get(parent)
        stmt = s.stmt_of(c)
        text = ast.unparse(stmt) if stmt is not None else ""
        if val.startswith("tcp://") or "MASTER_ADDR" in text or "master_addr" in text \
                or "dist_url" in text or "init_method" in text:
            if "setdefault" in text or ".get(" in text:
                continue  # only a default for a variable the launcher sets
            out.append(make(s.path, c.lineno, "loopback_master",
                            _('{val} as the master address of a multi-node script').format(val=val)))
    return out
