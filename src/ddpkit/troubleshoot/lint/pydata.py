"""Data rules (DistributedSampler, shuffle) and the entry point that runs every Python rule."""

from __future__ import annotations

import ast

from ddpkit.i18n import _
from ddpkit.troubleshoot.lint import Finding, make, twin
from ddpkit.troubleshoot.lint.pyfacts import Script, rankish, words

_EVAL_WORDS = ("val", "test", "eval", "dev", "valid", "infer", "predict")


def _target(s: Script, call: ast.Call) -> str:
    """The name a call's value is assigned to (x = Call(), x = Call() if c else None)."""
    stmt = s.stmt_of(call)
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and (
            stmt.value is call or isinstance(stmt.value, (ast.IfExp, ast.BoolOp))):
        return ast.unparse(stmt.targets[0])
    return ""


def _is_eval(name: str) -> bool:
    low = name.lower()
    return any(w in low for w in _EVAL_WORDS) and "train" not in low


def no_set_epoch(s: Script) -> list[Finding]:
    if s.managed() or any(q.endswith("set_epoch") for _unused, q in s.calls):
        return []
    loops = _epoch_loop_line(s) is not None or _loader_loop(s) is not None
    out = []
    for call in _sampler_calls(s):
        shuffle = s.arg(call, 3, "shuffle")
        if isinstance(shuffle, ast.Constant) and shuffle.value is False:
            continue
        name = _target(s, call)
        loader = ""
        parent = s.parent.get(call)
        if isinstance(parent, ast.keyword) and parent.arg == "sampler":
            loader = _target(s, s.parent[parent])
        fn = s.func_of(call)
        if not loops and _returned(s, call, name or loader):
            continue  # a data module's factory: the epochs (and set_epoch) are the caller's
        data = s.arg(call, 0, "dataset")
        if _is_eval(name or loader) or (fn is not None and _is_eval(fn.name)) or (
                data is not None and _is_eval(" ".join(words(data)))):
            continue  # evaluation samplers need no reshuffling
        out.append(make(s.path, call.lineno, "no_set_epoch",
                        _('DistributedSampler {value} never gets set_epoch(epoch)').format(value=name or loader or ''),
                        edits=_set_epoch_edit(s, call, name or (f"{loader}.sampler" if loader
                                                                else ""))))
        # the same mistake shown where the fix goes: the epoch loop, the loop over batches
        seen = [call.lineno]
        for line in (_epoch_loop_line(s), getattr(_loader_loop(s), "lineno", None)):
            if line is not None and all(abs(line - x) > 2 for x in seen):
                seen.append(line)
                out.append(twin(s.path, line, "no_set_epoch",
                                _('an epoch starts here without sampler.set_epoch(epoch)'),
                                call.lineno))
    return out


def _epoch_loop_line(s: Script) -> int | None:
    """First statement of the first `for epoch in ...` loop (where set_epoch belongs)."""
    for node in s.nodes:
        if isinstance(node, ast.For) and "epoch" in " ".join(words(node.target)
                                                             + words(node.iter)):
            fn = s.func_of(node)
            if fn is None or not _is_eval(fn.name):
                return node.body[0].lineno
    return None


def _loader_loop(s: Script) -> ast.For | None:
    """The first loop over training batches (for x in train_loader / enumerate(loader))."""
    best = None
    for node in s.nodes:
        if not isinstance(node, ast.For) or isinstance(node.target, ast.Name) and \
                "epoch" in node.target.id.lower():
            continue
        ws = " ".join(words(node.iter))
        if not any(w in ws for w in ("loader", "train_data", "dataloader", "dl")) or \
                _is_eval(ws):
            continue
        fn = s.func_of(node)
        if fn is not None and (_is_eval(fn.name) or fn.name.startswith("__")):
            continue  # an evaluation loop, or a loader's own __iter__
        if best is None or node.lineno < best.lineno:
            best = node
    return best


def _returned(s: Script, call: ast.Call, name: str) -> bool:
    """The sampler (or the loader built on it) leaves its function by `return`."""
    fn = s.func_of(call)
    if fn is None:
        return False
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            if any(sub is call for sub in ast.walk(node.value)):
                return True
            if name and name.split(".")[-1].split("[")[0].lower() in words(node.value):
                return True
    return False


def _sampler_calls(s: Script) -> list[ast.Call]:
    """DistributedSampler(...) calls, also through a name bound to the class
    (train_sampler = RandomSampler if single else DistributedSampler; train_sampler(ds))."""
    out = s.calls_to("DistributedSampler", "DistributedBucketSampler")
    aliases = {name for name, pairs in s.assigns.items() for _unused, v in pairs
               if not isinstance(v, ast.Call) and "distributedsampler" in words(v)}
    out += [c for c, _unused in s.calls if isinstance(c.func, ast.Name) and c.func.id in aliases]
    return out


def _set_epoch_edit(s: Script, call: ast.Call, sampler: str) -> tuple:
    if not sampler:
        return ()
    fn = s.func_of(call)
    for node in ast.walk(fn or s.tree):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name) \
                and "epoch" in node.target.id.lower() and node.lineno > call.lineno:
            if not sampler.startswith("self.") and s.func_of(node) is not fn:
                continue
            first = node.body[0]
            line = s.lines[first.lineno - 1]
            indent = line[:len(line) - len(line.lstrip())]
            return ((first.lineno, first.lineno - 1,
                     f"{indent}{sampler}.set_epoch({node.target.id})"),)
    return ()


def shuffle_with_sampler(s: Script) -> list[Finding]:
    out = []
    samplers = s.calls_to("DistributedSampler") or any(
        "sampler" in k.arg for c in s.calls_to("DataLoader") for k in c.keywords if k.arg)
    wrapped = s.calls_to("DistributedDataParallel", "FullyShardedDataParallel",
                         "DistributedOptimizer")
    split = _split_by_rank(s)
    for call in s.calls_to("DataLoader"):
        shuffle = s.kw(call, "shuffle")
        sampler = s.kw(call, "sampler") or s.kw(call, "batch_sampler")
        true = isinstance(shuffle, ast.Constant) and shuffle.value is True
        if sampler is not None and not (isinstance(sampler, ast.Constant)
                                        and sampler.value is None):
            if true:
                out.append(make(s.path, call.lineno, "shuffle_with_sampler",
                                _('DataLoader gets both sampler= and shuffle=True'), severity="error"))
                if shuffle.lineno - call.lineno > 2:  # a long call: the shuffle line itself
                    out.append(twin(s.path, shuffle.lineno, "shuffle_with_sampler",
                                    _('shuffle=True next to a sampler'), call.lineno))
            continue
        name = _target(s, call)
        if samplers or not wrapped or s.managed() or split or _is_eval(name):
            continue
        data = s.arg(call, 0, "dataset")
        if data is not None and _rank_split(s, data):
            continue
        if true or "train" in name.lower():
            out.append(make(s.path, call.lineno, "shuffle_with_sampler",
                            _('training DataLoader without a DistributedSampler: every rank reads the whole data set')))
    return out


def _split_by_rank(s: Script) -> bool:
    """Data split by rank in code: ds[rank::world], shard(index=rank), Subset by rank."""
    for node in s.nodes:
        if isinstance(node, ast.Slice) and rankish(node):
            return True
        if isinstance(node, ast.Call) and any(k.arg in ("shard_id", "index", "rank", "shard")
                                              and rankish(k.value) for k in node.keywords):
            q = s.qual(node.func).rsplit(".", 1)[-1]
            if q not in ("DistributedSampler", "init_process_group"):
                return True
    return False


def _rank_split(s: Script, data: ast.expr) -> bool:
    if rankish(data):
        return True
    if isinstance(data, ast.Name):
        return any(rankish(v) or "iterable" in " ".join(words(v))
                   for _unused, v in s.assigns.get(data.id, []))
    return False


def lint_python(path: str, text: str) -> list[Finding]:
    from ddpkit.troubleshoot.lint import pyrules, pysync

    s = Script(path, text)
    checks = (pyrules.deprecated_launcher, pyrules.local_rank_arg, pyrules.rank_from_args,
              no_set_epoch, shuffle_with_sampler, pyrules.no_set_device, pysync.unguarded_save,
              pysync.rank0_collective_desync, pysync.nccl_on_cpu, pysync.loopback_master,
              pyrules.fake_nccl_env, pyrules.no_destroy)
    out: list[Finding] = []
    for check in checks:
        out += check(s)
    return out
