"""Run records: every launch keeps its logs, plan, summary, node facts, stacks and diagnosis.

Layout of one record (a directory):
  record.json     what `ddpkit runs` lists: run id, state, hosts, ssh options, times, exit code
  plan.json       the plan as --dry-run --json prints it (secrets masked)
  facts.json      what each node's probe said about it (interpreter, torch, addresses)
  rank<N>.log     one file per rank; <host>.log: torchrun's own lines (as --log-dir writes)
  summary.json    the launch summary (--json's object)
  stacks.json / stacks.txt    when stacks were taken (a hang, Ctrl-C on a silent run)
  diagnosis.json  when the run failed

Records live in $DDPKIT_RUNS_DIR, else $XDG_CACHE_HOME/ddpkit/runs, else ~/.cache/ddpkit/runs;
with --log-dir DIR the record is DIR and the runs folder holds a link to it. Old records are
pruned by count and total size; a running one never.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from ddpkit.errors import EnvironmentFailure, UsageError
from ddpkit.i18n import _

KEEP = 50  # records kept at most
MAX_BYTES = 512 * 1024 * 1024  # and at most this much on disk, oldest removed first
STATES = ("running", "ok", "failed", "hung", "interrupted", "lost")


def runs_root(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("DDPKIT_RUNS_DIR"):
        return Path(env["DDPKIT_RUNS_DIR"])
    cache = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "ddpkit" / "runs"


@dataclass(frozen=True)
class RunInfo:
    name: str
    dir: Path
    run_id: str
    state: str
    started: float
    ended: float | None
    hosts: tuple[str, ...]
    exit_code: int | None
    verdict: str  # the summary's last word: first failure, straggler, "ok"
    record: dict  # the whole record.json

    @property
    def duration_s(self) -> float | None:
        end = self.ended if self.ended is not None else (time.time() if self.state == "running"
                                                          else None)
        return None if end is None else round(end - self.started, 1)

    def to_dict(self) -> dict:
        return {"name": self.name, "dir": str(self.dir), "run_id": self.run_id,
                "state": self.state, "started": self.started, "ended": self.ended,
                "duration_s": self.duration_s, "hosts": list(self.hosts),
                "exit_code": self.exit_code, "verdict": self.verdict}


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_info(path: Path) -> RunInfo | None:
    try:
        rec = json.loads((path / "record.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict):  # not a record ddpkit wrote
        return None
    state = rec.get("state", "lost")
    if state == "running" and not _alive(rec.get("launcher_pid")):
        state = "lost"  # the launcher was killed before it could write its summary
    return RunInfo(name=path.name, dir=path.resolve(), run_id=rec.get("run_id", ""), state=state,
                   started=float(rec.get("started", 0)), ended=rec.get("ended"),
                   hosts=tuple(h["name"] for h in rec.get("hosts", [])),
                   exit_code=rec.get("exit_code"), verdict=rec.get("verdict", ""), record=rec)


def list_runs(root: Path | None = None) -> list[RunInfo]:
    """Records, newest first; a --log-dir reused for several runs is listed once."""
    root = root or runs_root()
    if not root.is_dir():
        return []
    seen, out = set(), []
    infos = [read_info(p) for p in root.iterdir() if p.is_dir()]
    for info in sorted((i for i in infos if i), key=lambda i: i.started, reverse=True):
        if info.dir in seen:
            continue
        seen.add(info.dir)
        out.append(info)
    return out


def find_run(spec: str | None, root: Path | None = None) -> RunInfo:
    """spec: a record's name, run id, or directory; None: the latest."""
    root = root or runs_root()
    if spec and Path(spec).is_dir() and (Path(spec) / "record.json").is_file():
        info = read_info(Path(spec))
        if info:
            return info
    runs = list_runs(root)
    if not runs:
        raise UsageError(_('no run records in {root}').format(root=root),
                         _("records are written by 'ddpkit launch'; see 'ddpkit runs'"))
    if spec is None:
        return runs[0]
    for info in runs:
        if spec in (info.name, info.run_id):
            return info
    raise UsageError(_("no run record '{spec}' in {root}").format(spec=spec, root=root), _("'ddpkit runs' lists the records"))


class RunRecord:
    """The record of the run in progress; written as the run goes, finished at its end."""

    def __init__(self, dir: Path, data: dict) -> None:
        self.dir, self.data = dir, data

    @classmethod
    def create(cls, *, run_id: str, hosts: list[dict], ssh: dict, python: str, argv: list[str],
               plan: dict, facts: list[dict], log_dir: str | None = None,
               root: Path | None = None) -> RunRecord:
        root = root or runs_root()
        name = time.strftime("%Y%m%d-%H%M%S") + f"-{run_id}"
        try:
            root.mkdir(parents=True, exist_ok=True)
            if log_dir:
                target = Path(log_dir).resolve()
                target.mkdir(parents=True, exist_ok=True)
                (root / name).symlink_to(target, target_is_directory=True)
            else:
                target = root / name
                target.mkdir()
        except OSError as exc:
            raise EnvironmentFailure(
                _('cannot write the run record in {root}: {strerror}').format(root=root, strerror=exc.strerror),
                _('set DDPKIT_RUNS_DIR to a writable directory, or give --log-dir')) from None
        data = {"schema": 1, "name": name, "run_id": run_id, "state": "running",
                "started": time.time(), "ended": None, "launcher_pid": os.getpid(),
                "hosts": hosts, "ssh": ssh, "python": python, "argv": argv, "exit_code": None,
                "verdict": "", "dir": str(target)}
        record = cls(target, data)
        record.write_json("plan.json", plan)
        record.write_json("facts.json", facts)
        record.save()
        prune(root)
        return record

    def save(self) -> None:
        self.write_json("record.json", self.data)

    def write_json(self, name: str, obj) -> None:
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n")
        tmp.replace(self.dir / name)  # readers never see half a file

    def write_text(self, name: str, text: str) -> None:
        (self.dir / name).write_text(text)

    def finish(self, *, state: str, exit_code: int, verdict: str, summary: dict) -> None:
        self.write_json("summary.json", summary)
        self.data.update(state=state, ended=time.time(), exit_code=exit_code, verdict=verdict)
        self.save()


def _size(path: Path) -> int:
    total = 0
    for dirpath, _unused, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def prune(root: Path | None = None, keep: int = KEEP, max_bytes: int = MAX_BYTES) -> list[str]:
    """Remove the oldest finished records beyond `keep` or `max_bytes`; a record that is a
    link (--log-dir) loses only its link, never the user's directory."""
    root = root or runs_root()
    if not root.is_dir():
        return []
    entries = []
    for p in root.iterdir():
        info = read_info(p) if p.is_dir() else None
        started = info.started if info else p.lstat().st_mtime
        size = 0 if p.is_symlink() else _size(p)
        entries.append((started, p, size, info.state if info else "lost"))
    entries.sort(key=lambda e: e[0], reverse=True)
    removed, total = [], 0
    for i, (_unused, path, size, state) in enumerate(entries):
        total += size
        if state == "running" or (i < keep and total <= max_bytes):
            continue
        try:
            if path.is_symlink():
                path.unlink()
            else:
                shutil.rmtree(path)
            removed.append(path.name)
        except OSError:
            continue
    return removed


def parse_size(text: str) -> int:
    """'500M', '2G', '1048576' -> bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B")
    mult = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    if not number.isdigit():
        raise UsageError(_("size '{text}' is not a number with K/M/G").format(text=text), _('e.g. --max-size 500M'))
    return int(number) * mult
