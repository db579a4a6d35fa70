"""`ddpkit lint`: mistakes of distributed training scripts found before a run, never executing them.

Rules are data (rules.toml: severity, why, fix, source); pyrules.py finds them in Python by AST,
shell.py in launch lines of shell files; fixes.py turns the mechanical ones into a diff."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from importlib import resources

from ddpkit.data import tomllib
from ddpkit.i18n import _

SEVERITIES = ("info", "warn", "error")
KINDS = (
    "deprecated_launcher", "local_rank_arg", "rank_from_args", "no_set_epoch",
    "shuffle_with_sampler", "no_set_device", "unguarded_save", "rank0_collective_desync",
    "nccl_on_cpu", "loopback_master", "fake_nccl_env", "no_destroy",
)


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str
    title: str
    why: str
    fix: str
    source: str


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    kind: str
    severity: str
    message: str  # what was seen, in this script
    why: str
    fix: str
    source: str
    # for --diff: (line, old text, new text) edits; empty when the fix is not mechanical
    edits: tuple = field(default=(), compare=False)
    # a note repeating the finding at `same_as` where a reader may look for it (the call site,
    # the epoch loop, the option): never counted twice, never fails a run
    same_as: int = 0

    def to_dict(self) -> dict:
        return {"path": self.path, "line": self.line, "kind": self.kind,
                "severity": self.severity, "message": self.message, "why": self.why,
                "fix": self.fix, "source": self.source, "fixable": bool(self.edits),
                "same_as": self.same_as or None}


@functools.lru_cache(maxsize=None)
def rules() -> dict[str, Rule]:
    text = resources.files(__package__).joinpath("rules.toml").read_text(encoding="utf-8")
    out = {}
    for rid, raw in tomllib.loads(text)["rule"].items():
        if rid not in KINDS or raw.get("severity") not in SEVERITIES:
            raise ValueError(f"rules.toml: bad rule {rid}")
        out[rid] = Rule(id=rid, **raw)
    return out


def make(path: str, line: int, kind: str, message: str, *, severity: str = "",
         fix: str = "", edits: tuple = ()) -> Finding:
    rule = rules()[kind]
    return Finding(path=path, line=line, kind=kind, severity=severity or rule.severity,
                   message=message, why=_(rule.why), fix=fix or _(rule.fix), source=rule.source,
                   edits=edits)


def twin(path: str, line: int, kind: str, message: str, same_as: int) -> Finding:
    """The finding at `same_as` shown again at `line`, as a note."""
    return dataclasses.replace(make(path, line, kind, message, severity="info"), same_as=same_as)


def file_kind(path: str, text: str) -> str:
    """'python' or 'shell': by extension, then by the first line, then by whether it parses."""
    low = path.lower()
    if low.endswith((".py", ".pyw")):
        return "python"
    if low.endswith((".sh", ".bash", ".zsh", ".slurm", ".sbatch", ".pbs", ".job")):
        return "shell"
    first = text.split("\n", 1)[0]
    if first.startswith("#!"):
        return "python" if "python" in first else "shell"
    import ast

    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return "shell"
    return "python"


def lint_text(path: str, text: str, kind: str | None = None) -> list[Finding]:
    """Findings for one file's text, sorted by line. Raises SyntaxError for unparsable Python."""
    kind = kind or file_kind(path, text)
    if kind == "python":
        from ddpkit.troubleshoot.lint.pydata import lint_python

        found = lint_python(path, text)
    else:
        from ddpkit.troubleshoot.lint.shell import lint_shell

        found = lint_shell(path, text)
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    unique: dict = {}
    for f in found:  # one finding a line and kind: the most severe; the fixes of both are kept
        prev = unique.get((f.line, f.kind))
        if prev is None:
            unique[(f.line, f.kind)] = f
            continue
        keep, other = (f, prev) if (rank[f.severity], not f.same_as) > (
            rank[prev.severity], not prev.same_as) else (prev, f)
        unique[(f.line, f.kind)] = dataclasses.replace(keep, edits=keep.edits + other.edits)
    return sorted(unique.values(), key=lambda f: (f.line, f.kind))


def lint_lines(path: str, text: str) -> list[Finding]:
    """What can be found without parsing: launch commands and NCCL_* names, line by line (for a
    Python file that does not parse)."""
    import re

    from ddpkit.troubleshoot.lint.shell import _nccl_names

    out = [make(path, no, "deprecated_launcher", _('torch.distributed.launch is used'))
           for no, line in enumerate(text.splitlines(), 1)
           if re.search(r"torch\.distributed\.launch\b", line)]
    return out + _nccl_names(path, text.splitlines())


def lint_file(path: str) -> list[Finding]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return lint_text(path, f.read())
