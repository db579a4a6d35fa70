# torchrun, with its tee reading each rank's log to the end.
#
#   python @TMP@/bin/torchrun [torchrun's arguments...]
#   python @TMP@/bin/torchrun -m accelerate.commands.launch [its arguments...]
#
# is `python -m torch.distributed.run [...]` (the elastic agent, rendezvous and all, unchanged),
# or another launcher that runs torchrun's agent in its own process (accelerate launch), with
# one fix. `--tee` copies each rank's log file to the console in a thread that reads to
# end of file, then stops once the worker has finished; when the worker writes its last lines
# and exits between that thread's last read and its look at "finished", those lines are never
# shown (pytorch/pytorch#143823, open; seen in ddpkit's CI as a rank's last `OK` line missing
# from a correct run under load). Here a finished rank's file is read once more, to its end,
# before its thread stops: every line the rank wrote reaches the console.
#
# Named `torchrun` so that `ddpkit stacks` knows it as torchrun. Stdlib and torch
# only; with a torch whose tail_log differs, torchrun runs as it is.
import runpy
import sys


class _ReadToEnd:
    """`finished` as the tee thread sees it: set only when it was already set at the thread's
    previous look, so the thread reads the file to its end once more after the rank finished."""

    def __init__(self, event):
        self._event = event
        self._seen = False

    def is_set(self):
        if not self._event.is_set():
            return False
        if self._seen:
            return True
        self._seen = True
        return False

    def __getattr__(self, name):  # wait(), set(), clear(): the event's own
        return getattr(self._event, name)


def patch_tail_log():
    try:
        from torch.distributed.elastic.multiprocessing import tail_log
    except Exception:  # noqa: BLE001 - no fix is better than no torchrun
        return False
    original = getattr(tail_log, "tail_logfile", None)
    if original is None or getattr(original, "_ddpkit", False):
        return False

    def tail_logfile(*args, **kwargs):
        if "finished" in kwargs:
            kwargs["finished"] = _ReadToEnd(kwargs["finished"])
        return original(*args, **kwargs)

    tail_logfile._ddpkit = True
    tail_log.tail_logfile = tail_logfile
    return True


if __name__ == "__main__":
    module = "torch.distributed.run"
    if sys.argv[1:2] == ["-m"] and len(sys.argv) > 2:
        module = sys.argv[2]
        del sys.argv[1:3]
    patch_tail_log()
    runpy.run_module(module, run_name="__main__", alter_sys=True)
