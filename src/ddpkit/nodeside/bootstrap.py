# Script bootstrap: runs a training script as `__main__` exactly as `python SCRIPT ARGS` (or
# `python -m MODULE ARGS`) would, the way `coverage run` and `python -m cProfile` do, and then
# ends the process group while the interpreter is still fully alive.
#
#   python ddpkit_bootstrap.py SCRIPT [ARGS...]
#   python ddpkit_bootstrap.py -m MODULE [ARGS...]
#
# Why: with torch 2.13 a correct Gloo script aborts at interpreter exit in 5-30% of runs
# (SIGABRT, "terminate called without an active exception"): objects that still refer to the
# process group (a DDP model, tensors) are only freed during Py_FinalizeEx, a ProcessGroupGloo
# worker thread then drops its last work object, needs the GIL, and CPython ends the thread
# from under a noexcept destructor. Freeing them before finalization avoids it (README, "Exit
# status you can trust").
#
# What happens when the script ends, in Python's own order with two steps added (4, 5):
#   1. its traceback (user frames only) or its SystemExit message is printed; the exit code is
#      Python's (None -> 0, int -> int, anything else printed and 1; an exception -> 1);
#   2. non-daemon threads are joined (threading._shutdown, as the interpreter does first);
#   3. atexit handlers run, last registered first: they still see an initialised group, as in
#      plain Python, so a final barrier or save in one of them works;
#   4. only when the script succeeded (exit code 0): the default process group is destroyed if
#      the script imported torch.distributed and left it initialised (torch is never imported
#      here), the script's globals are dropped the way module teardown drops them (files it
#      left open are flushed), and, with torch.distributed imported, the garbage is collected
#      so Gloo's threads end now.
#      A failed script keeps Python's own teardown: destroying a group whose peers may be
#      stuck could block where plain Python exits;
#   5. a marker line on stderr, "@@ddpkit-script-end CODE": the launcher then knows that a
#      crash after it happened in the interpreter's own shutdown, not in training;
#   6. normal exit with that code (KeyboardInterrupt: by SIGINT, as Python does).
# Signals are left alone: SIGTERM from torchrun kills the worker as before.
#
# With `ddpkit launch --hang-timeout`, DDPKIT_WATCH_DIR names a folder, and a daemon thread
# ("ddpkit-watch", see watch_loop) serves the launcher's hang check from there: this rank's
# step count (from ddpkit.runtime, when the script uses it) and, on request, its flight-recorder
# dump. It sleeps between looks and never raises into the script.
# Stdlib only, Python 3.6+. DDPKIT_NO_BOOTSTRAP=1 or `ddpkit launch --no-bootstrap` skips it.
import atexit
import builtins
import gc
import os
import sys
import threading
import time
import types

MARK = "@@ddpkit-script-end "
OURS = sys.modules.get("__main__")  # our module stays alive once the script's takes its place
USAGE = "usage: ddpkit_bootstrap.py SCRIPT [ARGS...] | -m MODULE [ARGS...]"


def hidden_files():
    """Code files whose frames are ours, not the user's (leading frames of a traceback)."""
    import runpy

    return {main.__code__.co_filename, getattr(runpy, "__file__", ""), "<frozen runpy>"}


def user_traceback(tb, hidden):
    while tb is not None and tb.tb_frame.f_code.co_filename in hidden:
        tb = tb.tb_next
    return tb


def fresh_main():
    """A new `__main__` module for the script, so its names never clash with ours."""
    mod = types.ModuleType("__main__")
    mod.__builtins__ = builtins
    sys.modules["__main__"] = mod
    return mod


def set_path0(entry):
    """sys.path[0] is our directory now; the script's own rule: its directory (symlinks
    resolved), the current directory for -m; nothing with -P/-I."""
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return
    ours = os.path.dirname(os.path.realpath(main.__code__.co_filename))
    if sys.path and os.path.realpath(sys.path[0] or ".") == ours:
        sys.path[0] = entry
    else:
        sys.path.insert(0, entry)


def is_zip(path):
    import zipfile  # ~20 ms: only for a script not named .py

    return zipfile.is_zipfile(path)


def run_script(path, args):
    sys.argv = [path] + args
    mod = fresh_main()
    if os.path.isdir(path) or (not path.endswith((".py", ".pyw")) and is_zip(path)):
        # a directory or zip with __main__.py: Python runs its __main__ module from there
        import runpy

        set_path0(path)
        runpy._run_module_as_main("__main__", alter_argv=False)
        return mod
    from importlib.machinery import SourceFileLoader

    full = os.path.abspath(path)
    try:
        with open(full, "rb") as f:  # bytes: compile() honours the coding cookie, as Python does
            source = f.read()
    except OSError as exc:  # Python's own words and exit code for a script it cannot open
        sys.stderr.write("%s: can't open file %r: [Errno %s] %s\n"
                         % (sys.executable, full, exc.errno, exc.strerror))
        raise SystemExit(2) from None
    set_path0(os.path.dirname(os.path.realpath(full)))
    mod.__file__, mod.__cached__ = full, None
    mod.__loader__ = SourceFileLoader("__main__", full)
    code = compile(source, full, "exec", dont_inherit=True)
    exec(code, mod.__dict__)
    return mod


def run_module(name, args):
    import runpy

    sys.argv = ["-m"] + args  # runpy puts the module's file in argv[0], as `python -m` does
    mod = fresh_main()
    set_path0(os.getcwd())
    runpy._run_module_as_main(name, alter_argv=True)
    return mod


def exit_code_of(exc):
    """Python's handling of SystemExit: None -> 0, int -> it, else print it and 1."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stdout.flush()
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def report(exc):
    """Print an uncaught exception through sys.excepthook, user frames only."""
    tb = user_traceback(exc.__traceback__, hidden_files())
    exc.__traceback__ = tb
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    if sys.version_info >= (3, 12):
        sys.last_exc = exc
    sys.stdout.flush()
    try:
        sys.excepthook(type(exc), exc, tb)
    except Exception:
        sys.__excepthook__(type(exc), exc, tb)


def interpreter_exit_steps():
    """What Py_FinalizeEx does first: join non-daemon threads, then run atexit handlers."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()  # also runs threading's own exit hooks (concurrent.futures workers)
    atexit._run_exitfuncs()


def end_process_group():
    dist = sys.modules.get("torch.distributed")  # never import torch: the script did, or not
    if dist is None:
        return
    try:
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as exc:
        sys.stderr.write("ddpkit: destroy_process_group() at exit failed: %s\n" % exc)


def drop_globals(mod):
    """Module teardown's order: names starting with one underscore first, then the rest;
    set to None, not deleted, so late destructors find their names."""
    d = mod.__dict__
    for first in (True, False):
        for key in list(d):
            under = key.startswith("_") and not key.startswith("__")
            if key != "__builtins__" and (under or not first):
                d[key] = None


WATCH_POLL_S = 0.5
WATCH_THREAD = "ddpkit-watch"
FR_DUMPERS = (("fr_rank_", "_dump_fr_trace"), ("nccl_rank_", "_dump_nccl_trace"))


def start_watch(environ=None):
    """The watcher thread, when the launch asked for one and none runs yet (ddpkit.runtime
    also calls this, for a launch with --no-bootstrap)."""
    environ = os.environ if environ is None else environ
    folder = environ.get("DDPKIT_WATCH_DIR", "")
    if not folder or any(t.name == WATCH_THREAD for t in threading.enumerate()):
        return None
    rank = environ.get("RANK", "0")
    thread = threading.Thread(target=watch_loop, args=(folder, rank), name=WATCH_THREAD)
    thread.daemon = True
    thread.start()
    return thread


def mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def write_atomic(path, data):
    """Readers on the node never see half a file."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def current_steps():
    """ddpkit.runtime's step count, read without importing anything (None: not in use)."""
    runtime = sys.modules.get("ddpkit.runtime")
    steps = getattr(runtime, "_steps", None)
    return steps if isinstance(steps, int) else None


def dump_flight_recorder(folder, rank):
    """torch's flight recorder of this process, as its own pickle bytes: Gloo (and other
    non-NCCL) groups through _dump_fr_trace, NCCL through _dump_nccl_trace (CUDA builds).
    Without stack traces: a dump with them symbolizes them first, 2-4 s of CPU per rank on a
    busy machine (measured, torch 2.13), all ranks at once, in the middle of a teardown; the
    launcher takes each rank's place from py-spy instead. Only when the script imported
    torch.distributed; an old torch has neither dumper: nothing."""
    if sys.modules.get("torch.distributed") is None:
        return
    c10d = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
    for prefix, name in FR_DUMPERS:
        dumper = getattr(c10d, name, None)
        if dumper is None:
            continue
        try:
            data = dumper(True, False, False)  # collectives, no stack traces, not only active
        except Exception:
            continue
        if data:
            write_atomic(os.path.join(folder, "%s%s.pkl" % (prefix, rank)), bytes(data))


def watch_loop(folder, rank, poll=WATCH_POLL_S, stop=None):
    """Every `poll` seconds: write progress_rank_N ("STEPS UNIXTIME") when the step count
    changed; dump the flight recorder when dump_request is newer than the last one served.
    The main thread may be blocked in a collective meanwhile: the wait releases the GIL.
    `stop` (a threading.Event) ends it: tests only; the real one dies with its process."""
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return
    trigger = os.path.join(folder, "dump_request")
    progress = os.path.join(folder, "progress_rank_%s" % rank)
    served, written = mtime(trigger), None  # a request older than this process is not ours
    while True:
        if stop is None:
            time.sleep(poll)
        elif stop.wait(poll):
            return
        try:
            steps = current_steps()
            if steps is not None and steps != written:
                write_atomic(progress, ("%d %.3f\n" % (steps, time.time())).encode())
                written = steps
            asked = mtime(trigger)
            if asked is not None and (served is None or asked > served):
                served = asked
                dump_flight_recorder(folder, rank)
        except Exception:
            pass  # a full disk, a torch that cannot dump: the script runs on regardless


def main():
    argv = sys.argv[1:]
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        sys.stderr.write(USAGE + "\n")
        return 2, False
    start_watch()
    code, sigint, mod = 0, False, OURS
    try:
        if argv[0] == "-m":
            mod = run_module(argv[1], argv[2:])
        else:
            mod = run_script(argv[0], argv[1:])
    except SystemExit as exc:
        code = exit_code_of(exc)
    except BaseException as exc:  # noqa: B036 - exactly what the interpreter would catch
        report(exc)
        code, sigint = 1, isinstance(exc, KeyboardInterrupt)
    mod = sys.modules.get("__main__", mod)
    interpreter_exit_steps()
    if code == 0:
        end_process_group()
        if mod is not OURS:
            drop_globals(mod)
        del mod
        if "torch.distributed" in sys.modules:
            gc.collect()  # Gloo's threads end now; without torch, Python's own final one will do
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    sys.stderr.write("%s%d %d\n" % (MARK, code, os.getpid()))
    sys.stderr.flush()
    return code, sigint


if __name__ == "__main__":
    _code, _sigint = main()
    if _sigint:
        # Python ends an uncaught KeyboardInterrupt by SIGINT once finalized; the handler
        # that prints nothing keeps the traceback from being shown twice.
        sys.excepthook = lambda *exc: None
        raise KeyboardInterrupt
    raise SystemExit(_code)
