"""What `launch` does when a run stalls (--hang-timeout, or Ctrl-C on a silent run): take every
rank's stack before the teardown, judge them, keep them in the run record."""

from __future__ import annotations

import time
from typing import Mapping

from ddpkit.launch.hosts import Host
from ddpkit.launch.remote import SshOptions
from ddpkit.launch.stackdump import take_stacks
from ddpkit.troubleshoot.stacks import StackReport, busy, busy_fingerprint, judge

# torch's NCCL flight recorder: a ring buffer of the last collectives per rank, dumped to
# files when the NCCL watchdog times out (torch docs, "ProcessGroupNCCL Environment
# Variables"). torch 2.9+ reads TORCH_FR_BUFFER_SIZE / TORCH_FR_DUMP_TEMP_FILE and warns on
# every rank about the older TORCH_NCCL_TRACE_BUFFER_SIZE / TORCH_NCCL_DEBUG_INFO_TEMP_FILE,
# which older releases need. Nothing is recorded with Gloo.
OLD_NAMES = ("TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
NEW_NAMES = ("TORCH_FR_BUFFER_SIZE", "TORCH_FR_DUMP_TEMP_FILE")
NEW_SINCE = (2, 9)


def flight_recorder_env(run_id: str, environ: Mapping[str, str],
                        torch_version: str = "") -> list[tuple[str, str]]:
    """The variables --hang-timeout adds (never over the user's own, in either spelling):
    dumps go to /tmp/ddpkit-fr-RUN/nccl_trace_rank_N on each node; torch >= 2.6 analyses
    them with `python -m torch.distributed.flight_recorder.fr_trace DIR`."""
    nums = [int(x) for x in torch_version.split("+")[0].split(".")[:2] if x.isdigit()]
    size, path = NEW_NAMES if tuple(nums) >= NEW_SINCE else OLD_NAMES
    pairs = [(size, "2000"), ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
             (path, f"/tmp/ddpkit-fr-{run_id}/nccl_trace_rank_")]
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


class HangWatch:
    """The supervisor's on_stall: called in a thread with why ("hang", "SIGINT"); returns
    False when a silent run is busy after all (then it is called again after the next
    silence). A rank that is busy at the very same place twice in a row counts as hung: a
    CUDA synchronize spins on the CPU while it waits for a stuck NCCL kernel."""

    def __init__(self, hosts: list[Host], local: list[bool], ssh: SshOptions, python: str,
                 run_id: str, world_size: int, record=None, say=None) -> None:
        self.hosts, self.local, self.ssh, self.python = hosts, local, ssh, python
        self.run_id, self.world_size, self.record = run_id, world_size, record
        self.why = ""
        self.report: StackReport | None = None
        self.error = ""
        self.took_s = 0.0
        self.say = say or (lambda text: None)
        self.busy_before: tuple[str, ...] = ()

    def __call__(self, why: str) -> bool:
        t0 = time.monotonic()
        try:
            nodes = take_stacks(self.hosts, self.local, self.ssh, self.python, self.run_id,
                                timeout=15)
            report = judge(nodes, self.world_size, [h.name for h in self.hosts])
        except Exception as exc:  # the teardown must go on whatever happens here
            self.why, self.error = why, f"{type(exc).__name__}: {exc}"
            return True
        working = busy(nodes) if why == "hang" else ()
        seen = busy_fingerprint(nodes) if why == "hang" else ()
        if why == "hang" and report.rendezvous:
            # a node that has no torchrun yet may still be logging in: the next check decides
            late = tuple(f"{h}: no torchrun yet" for h in report.stragglers
                         if not h.startswith("--nnodes"))
            working, seen = working + late, seen + late
        if (seen and seen != self.busy_before) or (why == "hang" and not nodes_found(nodes)):
            self.busy_before = seen
            self.say(f"ddpkit: no output for a while, but not hung: "
                     f"{'; '.join(working[:3]) or 'no process of the run started yet'}")
            return False
        self.why, self.report, self.took_s = why, report, time.monotonic() - t0
        return True

    def cancel(self) -> None:
        """The supervisor heard from the run again while the stacks were being taken."""
        self.why, self.report, self.error = "", None, ""

    def save(self, record) -> None:
        """stacks.json and stacks.txt into the run record (after the run: a stall that was
        cancelled leaves nothing behind)."""
        if self.report is None:
            return
        record.write_json("stacks.json", {**self.report.to_dict(), "why": self.why,
                                          "took_s": round(self.took_s, 2)})
        record.write_text("stacks.txt", "\n".join(self.report.lines()) + "\n")

    def to_dict(self) -> dict | None:
        if not self.why:
            return None
        out = {"why": self.why, "took_s": round(self.took_s, 2), "error": self.error}
        if self.report is not None:
            rep = self.report.to_dict()
            out.update({k: rep[k] for k in ("verdict", "stragglers", "missing_ranks",
                                            "rendezvous", "groups", "problems")})
        return out
