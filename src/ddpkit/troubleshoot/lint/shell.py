"""Launch lines in shell files: torch.distributed.launch, torchrun, mpirun, horovodrun,
accelerate launch, deepspeed. Each logical line (backslash continuations joined) is split into
words that remember their physical line, so a finding points at the line to change."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from ddpkit.i18n import _
from ddpkit.troubleshoot.lint import Finding, make

_LAUNCHERS = ("torch.distributed.launch", "torch.distributed.run", "torchrun", "mpirun",
              "mpiexec", "horovodrun", "deepspeed", "accelerate")
_RANK_ARGS = ("--rank", "--local_rank", "--local-rank", "--global_rank", "--global-rank",
              "--node_rank", "--node-rank")
_LOOP = re.compile(r"^(tcp://)?(127\.0\.0\.1|localhost)(:\d+)?$")
_REMOTE = ("ssh", "pdsh", "srun", "clush", "pssh", "parallel-ssh")
_NCCL = re.compile(r"(?<![\w$])(?<!\$\{)(NCCL_[A-Z0-9_]*[A-Z0-9])(?=[=\s\"']|$)")
_OLD = re.compile(r"(\S*python[0-9.]*|\$\{?PYTHON\w*\}?)\s+-m\s+torch\.distributed\.launch\b")


@dataclass(frozen=True)
class Word:
    text: str
    line: int


@dataclass
class Launch:
    words: list
    launcher: str
    opts: dict  # option -> Word of its value
    script_at: int  # index of the first word of the training script (len(words) when none)

    def opt(self, *names: str) -> Word | None:
        for n in names:
            if n in self.opts:
                return self.opts[n]
        return None


def logical_lines(text: str) -> list[list[Word]]:
    out, cur = [], []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.lstrip().startswith("#") and not cur:
            continue
        cont = line.endswith("\\")
        body = line[:-1] if cont else line
        try:
            parts = shlex.split(body, comments=True)
        except ValueError:
            parts = body.split()
        cur += [Word(p, no) for p in parts]
        if not cont:
            if cur:
                out.append(cur)
            cur = []
    if cur:
        out.append(cur)
    return out


def _number(w: Word | None) -> int | None:
    return int(w.text) if w is not None and w.text.isdigit() else None


def parse_launch(words: list[Word]) -> Launch | None:
    for i, w in enumerate(words):
        base = w.text.rsplit("/", 1)[-1]
        if base in _LAUNCHERS and (base != "accelerate" or
                                   (i + 1 < len(words) and words[i + 1].text == "launch")):
            return _options(words, i, base)
    return None


def _options(words: list[Word], i: int, launcher: str) -> Launch:
    opts: dict = {}
    j = i + (2 if launcher == "accelerate" else 1)
    while j < len(words):
        t = words[j].text
        if t.endswith(".py") or (not t.startswith("-") and j > i + 1
                                 and not words[j - 1].text.startswith("-")):
            break
        if t.startswith("-"):
            if "=" in t:
                k, v = t.split("=", 1)
                opts[k.replace("-", "_").lstrip("_")] = Word(v, words[j].line)
            elif j + 1 < len(words) and not words[j + 1].text.startswith("-") \
                    and not words[j + 1].text.endswith(".py"):
                opts[t.replace("-", "_").lstrip("_")] = words[j + 1]
                j += 1
            else:
                opts[t.replace("-", "_").lstrip("_")] = Word("", words[j].line)
        j += 1
    return Launch(words=words, launcher=launcher, opts=opts, script_at=j)


def _multi_node(lch: Launch) -> bool:
    nnodes = lch.opt("nnodes", "num_nodes", "num_machines")
    if nnodes is not None:
        first = nnodes.text.split(":")[-1]
        return first.isdigit() and int(first) > 1
    ranked = lch.opt("node_rank", "machine_rank")
    if ranked is not None and not ranked.text.isdigit():
        return True
    hosts = lch.opt("H", "hosts", "host")
    return hosts is not None and "," in hosts.text


def lint_shell(path: str, text: str) -> list[Finding]:
    out: list[Finding] = []
    lines = text.splitlines()
    launches = []
    for words in logical_lines(text):
        lch = parse_launch(words)
        if lch is not None:
            launches.append(lch)
            out += _one_launch(path, lch, words, lines)
    out += _same_node_rank(path, launches)
    nnodes_env = re.search(r"\b(NNODES|NUM_NODES|N_NODES|WORLD_NODES)=[\"']?([2-9]|\d\d)", text)
    if nnodes_env or any(_multi_node(lch) for lch in launches):
        for no, line in enumerate(lines, 1):
            m = re.search(r"\bMASTER_ADDR=[\"']?(127\.0\.0\.1|localhost)\b", line)
            if m and not line.lstrip().startswith("#"):
                out.append(make(path, no, "loopback_master",
                                _('MASTER_ADDR={group} in a multi-node launch').format(group=m.group(1))))
    out += _nccl_names(path, lines)
    return out


def _one_launch(path: str, lch: Launch, words: list[Word], lines: list[str]) -> list[Finding]:
    out = []
    for w in words[:lch.script_at]:
        if w.text == "torch.distributed.launch":
            out.append(make(path, w.line, "deprecated_launcher",
                            _('python -m torch.distributed.launch'), edits=_torchrun_edit(
                                words, lines)))
    if _multi_node(lch):
        for key in ("master_addr", "rdzv_endpoint", "main_process_ip", "master_address",
                    "master_ip"):
            w = lch.opt(key)
            if w is not None and _LOOP.match(w.text):
                out.append(make(path, w.line, "loopback_master",
                                _('--{key} {text} with more than one node').format(key=key, text=w.text)))
        remote = [x for x in words if x.text.rsplit("/", 1)[-1] in _REMOTE]
        rank = lch.opt("node_rank", "machine_rank")
        if remote and rank is not None and rank.text.isdigit():
            out.append(make(path, rank.line, "rank_from_args",
                            _('--node_rank {text} is the same on every node started by {text2}').format(text=rank.text, text2=remote[0].text),
                            fix=_('give each node its own --node_rank (e.g. $SLURM_NODEID or the index of the host), or use --rdzv_backend=c10d')))
    args = words[lch.script_at + 1:]
    for k, w in enumerate(args):
        name, _unused, val = w.text.partition("=")
        if name not in _RANK_ARGS:
            continue
        if not val and k + 1 < len(args):
            val = args[k + 1].text
        if val.isdigit():
            out.append(make(path, w.line, "rank_from_args",
                            _('script argument {name} {val} gives every process the same rank').format(name=name, val=val),
                            fix=_('drop the argument; the script reads RANK/LOCAL_RANK that the launcher sets for each process')))
    return out


def _torchrun_edit(words: list[Word], lines: list[str]) -> tuple:
    edits = []
    for no in sorted({w.line for w in words}):
        old = lines[no - 1]
        new = _OLD.sub("torchrun", old)
        new = re.sub(r"\s--use[_-]env\b", "", new)
        if new != old:
            edits.append((no, no, new))
    return tuple(edits)


def _same_node_rank(path: str, launches: list[Launch]) -> list[Finding]:
    ranked = [(lch, lch.opt("node_rank", "machine_rank")) for lch in launches
              if _multi_node(lch)]
    ranked = [(lch, w) for lch, w in ranked if w is not None and w.text.isdigit()]
    if len(ranked) < 2 or len({w.text for _unused, w in ranked}) > 1:
        return []
    return [make(path, w.line, "rank_from_args",
                 _('every launch line passes --node_rank {text}').format(text=w.text),
                 fix=_('number the nodes 0..nnodes-1: one --node_rank per node'))
            for _unused, w in ranked[1:]]


def _nccl_names(path: str, lines: list[str]) -> list[Finding]:
    from ddpkit.troubleshoot.lint.envnames import judge

    out = []
    for no, line in enumerate(lines, 1):
        body = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        if re.match(r"\s*(unset|echo|printf)\b", body):
            continue
        for m in _NCCL.finditer(body):
            verdict = judge(m.group(1))
            if verdict:
                out.append(make(path, no, "fake_nccl_env", verdict[1], severity=verdict[0]))
    return out
