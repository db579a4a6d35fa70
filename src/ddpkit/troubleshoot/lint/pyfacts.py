"""What the Python rules need to know about a script, read once from its AST: imports, calls by
qualified name, assignments, argparse options, functions, and which code runs on rank 0 only."""

from __future__ import annotations

import ast
import functools
import re

from ddpkit.troubleshoot.lint.pyparse import dotted, parents, parse_tolerant

COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
    "broadcast_object_list", "barrier", "monitored_barrier", "reduce", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "gather_object", "scatter", "scatter_object_list",
    "all_to_all", "all_to_all_single", "new_group",
    # Horovod and accelerate spellings of the same thing
    "allreduce", "allreduce_", "allgather", "allgather_object", "broadcast_", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "alltoall", "join", "wait_for_everyone",
    "gather_for_metrics",
}
_COLLECTIVE_OWNERS = ("torch.distributed", "horovod", "hvd", "accelerator", "self.accelerator")
# identifiers that name "the main process" by themselves (if is_main_process(): ...)
_MAIN_WORDS = ("main_process", "is_master", "master_process", "is_main", "primary",
               "world_process_zero", "global_zero", "rank0", "rank_zero", "is_rank_0",
               "local_master", "master")
_RANK_WORDS = ("rank", "local_process_index", "process_index", "proc_id", "procid")
_GPU_WORDS = ("gpu", "gpu_id", "local_gpu", "device_id", "args.gpu")
FACTORIES = {"tensor", "zeros", "ones", "empty", "full", "arange", "rand", "randn", "as_tensor",
             "from_numpy", "zeros_like", "ones_like", "LongTensor", "FloatTensor", "Tensor"}


def words(node: ast.AST, nodes: list | None = None) -> list[str]:
    """Names, attributes and called names in an expression, lower-cased."""
    out = []
    for sub in nodes if nodes is not None else ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id.lower())
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr.lower())
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and len(sub.value) < 40:
            out.append(sub.value.lower())
    return out


def rankish(node: ast.AST) -> bool:
    return any(any(w in word for w in _RANK_WORDS) or word in _GPU_WORDS for word in words(node))


def _zero_set(node: ast.AST) -> bool | None:
    """True for 0 or a list/tuple/set containing 0, False for another constant, None otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
        return node.value in (0, "0")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        vals = [e.value for e in node.elts if isinstance(e, ast.Constant)]
        return 0 in vals
    return None


def polarity(test: ast.AST) -> str | None:
    """'zero' when the test holds only on rank 0, 'other' when only off rank 0, else None."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = polarity(test.operand)
        return {"zero": "other", "other": "zero"}.get(inner or "")
    if isinstance(test, ast.BoolOp):
        found = [p for p in (polarity(v) for v in test.values) if p]
        return found[0] if found and len(set(found)) == 1 else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        if not rankish(left):
            left, right = right, left
        if not rankish(left) or rankish(right):
            return None
        zero = _zero_set(right)
        if zero is None:
            return None
        if isinstance(op, (ast.Eq, ast.In, ast.Is)):
            return "zero" if zero else None
        if isinstance(op, (ast.NotEq, ast.NotIn, ast.IsNot)):
            return "other" if zero else None
        if isinstance(op, ast.Gt) and zero:
            return "other"
        if isinstance(op, ast.LtE) and zero:
            return "zero"
        return None
    if isinstance(test, (ast.Name, ast.Attribute, ast.Call)):
        ws = words(test.func if isinstance(test, ast.Call) else test)
        if any(any(m in w for m in _MAIN_WORDS) for w in ws):
            return "zero"
        if ws and any(w in ("rank", "local_rank", "global_rank") for w in ws[:1]):
            return "other"  # `if rank:` holds off rank 0
    return None


def _ends_flow(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Continue, ast.Raise))


class Script:
    """One parsed script. Everything is computed once; rules only query."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.lines = text.splitlines()
        self.tree = parse_tolerant(text)
        self.parent: dict[ast.AST, ast.AST] = {}
        self.aliases: dict[str, str] = {}
        self.calls: list[tuple[ast.Call, str]] = []
        self.functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        self.methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}  # in a class here
        self.plain: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}  # not in a class
        self.assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = {}  # name or a.b text
        self.attr_assigns: dict[str, list[tuple[ast.AST, ast.expr]]] = {}  # attr -> values
        self.options: dict[str, ast.Call] = {}  # argparse dest -> add_argument call
        self.strings: list[ast.Constant] = []
        self._walk()

    # ---- collection
    def _walk(self) -> None:
        self.parent = parents(self.tree)
        self.nodes = [self.tree, *self.parent]  # one walk; rules scan this list
        for node in self.nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.aliases[a.asname or a.name.split(".")[0]] = (
                        a.name if a.asname else a.name.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node
                if isinstance(self.parent.get(node), ast.ClassDef):
                    self.methods[node.name] = node
                else:
                    self.plain[node.name] = node
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                self._assign(node)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                self.strings.append(node)
        for node in self.nodes:
            if isinstance(node, ast.Call):
                q = self.qual(node.func)
                self.calls.append((node, q))
                if q.endswith("add_argument"):
                    self._option(node)
        self.calls.sort(key=lambda c: (c[0].lineno, c[0].col_offset))
        self.by_name: dict[str, list[ast.Call]] = {}
        for c, q in self.calls:
            self.by_name.setdefault(q.rsplit(".", 1)[-1], []).append(c)
        self._polarity: dict[ast.AST, str | None] = {}

    def _assign(self, node: ast.AST) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if value is None:
            return
        for t in targets:
            pairs = [(t, value)]
            if isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                    and len(t.elts) == len(value.elts):
                pairs = list(zip(t.elts, value.elts))
            elif isinstance(t, (ast.Tuple, ast.List)):
                pairs = [(e, value) for e in t.elts]
            for tgt, val in pairs:
                if isinstance(tgt, ast.Name):
                    self.assigns.setdefault(tgt.id, []).append((node, val))
                elif isinstance(tgt, ast.Attribute):
                    self.assigns.setdefault(dotted(tgt), []).append((node, val))
                    self.attr_assigns.setdefault(tgt.attr, []).append((node, val))
                elif isinstance(tgt, ast.Subscript):
                    self.attr_assigns.setdefault(ast.unparse(tgt), []).append((node, val))

    def _option(self, call: ast.Call) -> None:
        flags = [a.value for a in call.args if isinstance(a, ast.Constant)
                 and isinstance(a.value, str)]
        dest = self.kw(call, "dest")
        if isinstance(dest, ast.Constant) and isinstance(dest.value, str):
            self.options[dest.value] = call
            return
        longs = [f for f in flags if f.startswith("--")] or flags
        if longs:
            self.options[longs[0].lstrip("-").replace("-", "_")] = call
            for f in flags:
                self.options.setdefault(f.lstrip("-").replace("-", "_"), call)

    # ---- queries
    @functools.cached_property
    def tree_words(self) -> set[str]:
        return set(words(self.tree, self.nodes))

    @functools.cached_property
    def tree_env(self) -> list[str]:
        return env_names(self.tree, self.nodes)

    def qual(self, node: ast.AST) -> str:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qual(node.value)
            return f"{base}.{node.attr}" if base else node.attr
        if isinstance(node, ast.Call):
            base = self.qual(node.func)
            return f"{base}()" if base else ""
        return ""

    def calls_to(self, *names: str) -> list[ast.Call]:
        out = [c for n in names for c in self.by_name.get(n, ())]
        return sorted(out, key=lambda c: (c.lineno, c.col_offset)) if len(names) > 1 else out

    def polarity(self, test: ast.AST) -> str | None:
        if test not in self._polarity:
            self._polarity[test] = polarity(test)
        return self._polarity[test]

    def imports(self, prefix: str) -> bool:
        return any(v == prefix or v.startswith(prefix + ".") for v in self.aliases.values())

    @staticmethod
    def kw(call: ast.Call, name: str) -> ast.expr | None:
        for k in call.keywords:
            if k.arg == name:
                return k.value
        return None

    def arg(self, call: ast.Call, pos: int, name: str) -> ast.expr | None:
        found = self.kw(call, name)
        if found is None and len(call.args) > pos and not any(
                isinstance(a, ast.Starred) for a in call.args[:pos + 1]):
            found = call.args[pos]
        return found

    def func_of(self, node: ast.AST):
        cur = self.parent.get(node)
        while cur is not None and not isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
            cur = self.parent.get(cur)
        return cur

    def stmt_of(self, node: ast.AST) -> ast.AST:
        cur = node
        while cur is not None and not isinstance(cur, ast.stmt):
            cur = self.parent.get(cur)
        return cur or node

    def guard(self, node: ast.AST) -> str | None:
        """The rank guard the node runs under: 'zero', 'other' or None (every rank)."""
        child, cur = node, self.parent.get(node)
        while cur is not None:
            if isinstance(cur, (ast.If, ast.IfExp, ast.While)):
                pol = self.polarity(cur.test)
                if pol and child is not cur.test:
                    in_else = child in (cur.orelse if isinstance(cur.orelse, list)
                                        else [cur.orelse])
                    return {"zero": "other", "other": "zero"}[pol] if in_else else pol
            body = getattr(cur, "body", None)
            if isinstance(body, list) and child in body:
                for prev in body[:body.index(child)]:
                    if isinstance(prev, ast.If) and not prev.orelse and _ends_flow(prev.body):
                        pol = self.polarity(prev.test)
                        if pol:  # `if rank != 0: return` -> what follows runs on rank 0 only
                            return {"zero": "other", "other": "zero"}[pol]
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    any(m in w for m in _MAIN_WORDS) for d in cur.decorator_list
                    for w in words(d)):
                return "zero"  # @rank_zero_only, @main_process_only, @master_only
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return None
            child, cur = cur, self.parent.get(cur)
        return None

    def target(self, call: ast.Call):
        """The function of this file a call runs: f() a plain function, x.m() a method of a
        class defined here (callbacks.run() is not this file's module-level run())."""
        f = call.func
        if isinstance(f, ast.Name):
            return self.plain.get(f.id)
        if isinstance(f, ast.Attribute):
            return self.methods.get(f.attr)
        return None

    def no_grad(self, node: ast.AST) -> bool:
        """Runs under torch.no_grad()/inference_mode() (a with block or a decorated function):
        there DDP's forward syncs nothing (pytorch#54059, fixed by #54159)."""
        cur = self.parent.get(node)
        while cur is not None:
            if isinstance(cur, (ast.With, ast.AsyncWith)) and any(
                    w in ("no_grad", "inference_mode") for i in cur.items
                    for w in words(i.context_expr)):
                return True
            if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return any(w in ("no_grad", "inference_mode") for d in cur.decorator_list
                           for w in words(d))
            cur = self.parent.get(cur)
        return False

    def callers(self, fname: str) -> list[ast.Call]:
        fn = self.functions.get(fname)
        return [c for c, _ in self.calls if fn is not None and self.target(c) is fn]

    def is_collective(self, call: ast.Call, q: str) -> bool:
        name = q.rsplit(".", 1)[-1]
        if name not in COLLECTIVES:
            return False
        owner = q.rsplit(".", 1)[0] if "." in q else ""
        if any(owner.startswith(o) for o in _COLLECTIVE_OWNERS) or "accelerator" in owner:
            return True
        # from torch.distributed import all_reduce
        return self.aliases.get(name, "").startswith(("torch.distributed", "horovod"))

    def local_names(self, fn) -> set[str]:
        names = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
        return names

    def distributed(self) -> bool:
        """The script runs as several processes (torch.distributed, DDP, Horovod, spawn)."""
        for _, q in self.calls:
            name = q.rsplit(".", 1)[-1]
            if q.startswith("torch.distributed.") or name in (
                    "DistributedDataParallel", "init_process_group", "spawn", "init_distributed"):
                return True
            if q.startswith(("horovod", "deepspeed.")) and name in ("init", "initialize"):
                return True
        return False

    def managed(self) -> bool:
        """accelerate, Lightning or DeepSpeed own the sampler, device and launch details."""
        return any(self.imports(m) for m in ("accelerate", "lightning", "pytorch_lightning",
                                             "deepspeed", "colossalai", "composer"))


ENV_READS = ("environ", "getenv", "get_env")
_ENV_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")


def env_names(node: ast.AST, nodes: list | None = None) -> list[str]:
    """Names of environment variables an expression reads (os.environ['X'], os.getenv('X'), ...)."""
    out = []
    for sub in nodes if nodes is not None else ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Attribute) \
                and sub.value.attr == "environ":
            key = sub.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                out.append(key.value)
        elif isinstance(sub, ast.Call):
            f = sub.func
            fname = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = f.value if isinstance(f, ast.Attribute) else None
            env_call = fname in ("getenv", "get_env") or (
                fname in ("get", "setdefault", "pop")
                and isinstance(owner, ast.Attribute) and owner.attr == "environ")
            if env_call and sub.args and isinstance(sub.args[0], ast.Constant) \
                    and isinstance(sub.args[0].value, str):
                out.append(sub.args[0].value)
    return [n for n in out if _ENV_RE.match(n)]
