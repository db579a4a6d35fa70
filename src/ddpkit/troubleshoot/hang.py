"""What `launch` does when a run stalls (--hang-timeout, or Ctrl-C on a silent run): take every
rank's stack before the teardown, judge them, keep them in the run record."""

from __future__ import annotations

import base64
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Mapping

from ddpkit.i18n import _
from ddpkit.launch.hosts import Host
from ddpkit.launch.proc import run_cmd
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.stackdump import take_stacks
from ddpkit.troubleshoot.flight import FlightReport, advancing, judge_flight, records_from
from ddpkit.troubleshoot.stacks import (
    StackReport,
    busy,
    busy_fingerprint,
    judge,
    place_of,
    ranks_word,
)

FR_WAIT_S = 2.0  # the watchers look every 0.5 s; a dump without stack traces takes ~1 ms
FR_KEEP = 20  # entries per rank in the summary
FR_RAW_MAX = 512 << 10  # bigger dumps stay summarised only
FR_TRACE = "torch.distributed.flight_recorder.fr_trace"

# torch's NCCL flight recorder: a ring buffer of the last collectives per rank, dumped to
# files when the NCCL watchdog times out (torch docs, "ProcessGroupNCCL Environment
# Variables"). torch 2.9+ reads TORCH_FR_BUFFER_SIZE / TORCH_FR_DUMP_TEMP_FILE and warns on
# every rank about the older TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
# which older releases need. torch 2.13 records Gloo collectives in it too (checked with the
# CPU build); the in-process watcher (nodeside/bootstrap.py) dumps it on request, for Gloo and
# NCCL alike, into DDPKIT_WATCH_DIR: the guard's temporary folder, removed with the node's run.
OLD_NAMES = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
NEW_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")
NEW_SINCE = (2, 9)
WATCH_DIR, WATCH_DIR_VALUE = "DDPKIT_WATCH_DIR", "@TMP@/watch"


def flight_recorder_env(run_id: str, environ: Mapping[str, str],
                        torch_version: str = "") -> list[tuple[str, str]]:
    """The variables --hang-timeout adds (never over the user's own, in either spelling):
    the recorder's size (both backends), NCCL's own dumps on a watchdog timeout to
    /tmp/ddpkit-fr-RUN/nccl_trace_rank_N, and the watcher's folder (@TMP@: the node's
    temporary folder). torch >= 2.6 analyses dumps with
    `python -m torch.distributed.flight_recorder.fr_trace DIR`."""
    nums = [int(x) for x in torch_version.split("+")[0].split(".")[:2] if x.isdigit()]
    size, path = NEW_NAMES if tuple(nums) >= NEW_SINCE else OLD_NAMES
    pairs = [(size, "2000"), ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
             (path, f"/tmp/ddpkit-fr-{run_id}/nccl_trace_rank_"),
             (WATCH_DIR, WATCH_DIR_VALUE)]
    taken = set(environ)
    return [(k, v) for k, v in pairs if k not in taken and not _same_kind(k, taken)]


def _same_kind(name: str, taken: set) -> bool:
    """The user set this setting in the other spelling."""
    for pair in zip(OLD_NAMES, NEW_NAMES):
        if name in pair and set(pair) & taken:
            return True
    return False


def nodes_found(nodes) -> bool:
    return any(n.procs for n in nodes)


RDZV_GRACE_S = 30.0


class HangWatch:
    """The supervisor's on_stall: called in a thread with why ("hang", "SIGINT"); returns
    False when a silent run is busy after all (then it is called again after the next
    silence), or N seconds when a rank stepped recently (called again after N s more of
    silence, when that step is hang_timeout old). A rank that is busy at the very same place twice in a row counts as hung: a
    CUDA synchronize spins on the CPU while it waits for a stuck NCCL kernel."""

    def __init__(self, hosts: list[Host], local: list[bool], ssh: SshOptions, python: str,
                 run_id: str, world_size: int, record=None, say=None,
                 hang_timeout: float = 0.0) -> None:
        self.hosts, self.local, self.ssh, self.python = hosts, local, ssh, python
        self.run_id, self.world_size, self.record = run_id, world_size, record
        self.why = ""
        self.report: StackReport | None = None
        self.error = ""
        self.took_s = 0.0
        self.say = say or (lambda text: None)
        self.busy_before: tuple[str, ...] = ()
        self.rdzv_grace = False  # the one look more an all-joined rendezvous gets
        self.hang_timeout = hang_timeout
        self.flight: FlightReport | None = None
        self.fr_summary: dict = {}  # rank -> what its node brought back (raw dumps apart)
        self.fr_nodes: list[dict] = []  # per node: how long py-spy and the dumps took
        self.fr_raw: dict[str, bytes] = {}  # "fr_rank_3" -> the dump, when small
        self.fr_trace: threading.Thread | None = None
        self.fr_trace_text = ""
        self.fr_lock = threading.Lock()
        self.saved_to = None  # the record save() wrote into: fr_trace.txt follows when ready

    def _watch_request(self, why: str) -> dict:
        return {"recent_s": self.hang_timeout if why == "hang" else 0.0,
                "fr_wait_s": FR_WAIT_S, "keep": FR_KEEP, "raw_max": FR_RAW_MAX}

    def __call__(self, why: str) -> bool | float:
        t0 = time.monotonic()
        try:
            nodes = take_stacks(self.hosts, self.local, self.ssh, self.python, self.run_id,
                                timeout=15, watch=self._watch_request(why))
            report = judge(nodes, self.world_size, [h.name for h in self.hosts])
            records = records_from(nodes)
        except Exception as exc:  # the teardown must go on whatever happens here
            self.why, self.error = why, f"{type(exc).__name__}: {exc}"
            return True
        moving = advancing(records, self.hang_timeout) if why == "hang" else []
        if moving:
            self.say(_("ddpkit: no output for a while, but not hung: {ranks} made a step "
                       "{age:.0f} s ago").format(
                ranks=ranks_word([r.rank for r in moving]),
                age=min(r.step_age_s or 0.0 for r in moving)))
            # look again when the hang timeout has passed since the last step, not a whole
            # hang timeout after this check
            return max(1.0, self.hang_timeout - min(r.step_age_s or 0.0 for r in moving))
        if why == "hang" and report.rendezvous and not report.stragglers and not self.rdzv_grace:
            # Every node is in the rendezvous and none is missing: it is completing, slowly on a
            # loaded machine (CI once judged a correct run HUNG here, its workers about to
            # start). One look more after RDZV_GRACE_S; still there then, it is a hang.
            self.rdzv_grace = True
            self.say(_("ddpkit: no output for a while, but not hung: every node is in torchrun's "
                       "rendezvous; looking again in {seconds:.0f} s").format(seconds=RDZV_GRACE_S))
            return RDZV_GRACE_S
        working = busy(nodes) if why == "hang" else ()
        seen = busy_fingerprint(nodes) if why == "hang" else ()
        if why == "hang" and report.rendezvous:
            # a node that has no torchrun yet may still be logging in: the next check decides
            late = tuple(_("{host}: no torchrun yet").format(host=h) for h in report.stragglers
                         if not h.startswith("--nnodes"))
            working, seen = working + late, seen + late
        if (seen and seen != self.busy_before) or (why == "hang" and not nodes_found(nodes)):
            self.busy_before = seen
            self.say(_("ddpkit: no output for a while, but not hung: {working}").format(
                working="; ".join(working[:3])) if working else
                _("ddpkit: no output for a while, but not hung: no process of the run started "
                  "yet"))
            return False
        self.flight = judge_flight(records, collective_places(nodes))
        report = with_flight(report, self.flight)
        self.why, self.report, self.took_s = why, report, time.monotonic() - t0
        self._keep_dumps(nodes)
        return True

    def announce(self) -> None:
        """The supervisor judged the run hung and starts the teardown: name the straggler now,
        not after every node has stopped (the teardown takes seconds; the summary repeats it)."""
        if self.why == "hang" and self.report is not None and self.report.verdict:
            self.say(_("ddpkit: HUNG, tearing every node down; {verdict}").format(
                verdict=self.report.verdict))

    def cancel(self) -> None:
        """The supervisor heard from the run again while the stacks were being taken."""
        self.why, self.report, self.error = "", None, ""
        self.flight, self.fr_summary, self.fr_raw, self.fr_nodes = None, {}, {}, []

    def _keep_dumps(self, nodes) -> None:
        """The summaries for fr.json and the small raw dumps for fr/."""
        for n in nodes:
            if n.watch:
                self.fr_nodes.append({"host": n.host, **{k: n.watch.get(k) for k in (
                    "asked", "pyspy_s", "waited_s", "dumped_after_s")}})
            for rank, info in (n.watch or {}).get("ranks", {}).items():
                if rank in self.fr_summary:
                    continue
                info = {"host": n.host, **info, "dumps": dict(info.get("dumps") or {})}
                for prefix, dump in list(info["dumps"].items()):
                    raw = dump.get("raw_b64")
                    if raw:
                        self.fr_raw[f"{prefix}{rank}"] = base64.b64decode(raw)
                    info["dumps"][prefix] = {k: v for k, v in dump.items() if k != "raw_b64"}
                self.fr_summary[rank] = info

    def _run_fr_trace(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="ddpkit-fr-"))
        try:
            out = []
            for prefix in sorted({name.rstrip("0123456789") for name in self.fr_raw}):
                for name, data in self.fr_raw.items():
                    if name.startswith(prefix):
                        (folder / name).write_bytes(data)
                done = run_cmd([sys.executable, "-m", FR_TRACE, str(folder), "-p", prefix],
                               timeout=120)
                out.append(f"$ python -m {FR_TRACE} fr -p {prefix}\n{done.stdout}{done.stderr}"
                           f"{done.error}")
                for name in list(folder.iterdir()):
                    name.unlink()
            text = "\n".join(out)
        except Exception as exc:  # an analyser that fails must not fail the teardown
            text = f"fr_trace failed: {type(exc).__name__}: {exc}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        with self.fr_lock:
            self.fr_trace_text = text
            self._write_fr_trace()

    def _write_fr_trace(self) -> None:
        if self.saved_to is not None and self.fr_trace_text and self.why:
            try:
                self.saved_to.write_text("fr_trace.txt", self.fr_trace_text)
            except OSError:
                pass

    def save(self, record) -> None:
        """stacks.json and stacks.txt into the run record (after the run: a stall that was
        cancelled leaves nothing behind)."""
        if self.report is None:
            return
        record.write_json("stacks.json", {**self.report.to_dict(), "why": self.why,
                                          "took_s": round(self.took_s, 2)})
        record.write_text("stacks.txt", "\n".join(self.report.lines()) + "\n")
        if self.fr_summary:
            record.write_json("fr.json", {"schema": 1, "why": self.why,
                                          "judged": self.flight.to_dict() if self.flight else None,
                                          "nodes": self.fr_nodes, "ranks": self.fr_summary})
        if self.fr_raw:
            folder = Path(record.dir) / "fr"
            folder.mkdir(exist_ok=True)
            for name, data in self.fr_raw.items():
                (folder / name).write_bytes(data)
        with self.fr_lock:
            self.saved_to = record
        if self.fr_raw and fr_trace_available():
            # torch's own analyser imports torch (seconds on a busy machine): the summary
            # does not wait for it; a non-daemon thread, so the launcher exits only once
            # fr_trace.txt is written
            self.fr_trace = threading.Thread(target=self._run_fr_trace, daemon=False)
            self.fr_trace.start()

    def to_dict(self) -> dict | None:
        if not self.why:
            return None
        out = {"why": self.why, "took_s": round(self.took_s, 2), "error": self.error}
        if self.report is not None:
            rep = self.report.to_dict()
            out.update({k: rep[k] for k in ("verdict", "stragglers", "missing_ranks",
                                            "rendezvous", "groups", "problems", "evidence")})
        if self.flight is not None:
            out["flight_recorder"] = self.flight.to_dict()
        return out


def collective_places(nodes) -> dict[int, tuple[str, int]]:
    """rank -> (file, line) of the collective py-spy saw it wait in."""
    out = {}
    for n in nodes:
        for p in n.procs:
            place = place_of(p) if p.role == "worker" and p.rank is not None else None
            if place is not None and place.kind == "collective" and place.file:
                out.setdefault(p.rank, (place.file, place.line))
    return out


def with_flight(report: StackReport, flight: FlightReport) -> StackReport:
    """The flight recorder's evidence under the stacks; its verdict where the stacks name
    nobody (every rank waits in the same collective, or py-spy could not read them)."""
    if not flight.lines:
        return report
    evidence = tuple(_("flight recorder: {line}").format(line=line) for line in flight.lines)
    if report.stragglers or not flight.stragglers:
        return replace(report, evidence=evidence)
    return replace(report, evidence=evidence, verdict=flight.verdict,
                   stragglers=flight.stragglers)


def fr_trace_available() -> bool:
    """torch's analyser is installed here (looked up without importing torch)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    roots = list(spec.submodule_search_locations or []) if spec else []
    return any((Path(r) / "distributed" / "flight_recorder" / "fr_trace.py").is_file()
               for r in roots)
