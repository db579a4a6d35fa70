# Node agent: answers the launcher's questions over one SSH session, one JSON line each way
# (stdlib only, Python 3.6+). One session per node serves the whole preflight: SSH and the
# login shell start once, however many questions follow.
#   {"op": "probe", "source": "<nodeside/probe.py>", "args": [workdir, script, kind]}
#       -> {"probe": {...}}              (probe.py's collect(), run here)
#   {"op": "call", "target": "ddpkit.prepare.doctor:run_doctor", "kwargs": {"port": 29500}}
#       -> {"result": {...}} or {"result": null, "error": "..."}   (when the node has ddpkit:
#       runs it in this process, no second start-up; the agent itself knows no ddpkit module)
#   {"op": "listen", "ports": [29500, 0]}   (0: any free port)
#       -> {"listening": [{"want": 29500, "port": 29500, "error": ""}, ...]}
#   {"op": "dial", "targets": [{"dst": "node1", "ip": "10.0.0.2", "port": 41234, ...}], "timeout": 3}
#       -> {"links": [{..., "state": "ok|refused|filtered|no_route|error", "ms": 1.2, "error": ""}]}
#   {"op": "become", "argv": ["-c", "...", ...]}  -> {"became": true}, then this process execs
#       sys.executable with argv: the launcher's run (the node guard) takes this session over,
#       so the node pays for one SSH login, not two. Listeners close at the exec (CLOEXEC).
# Listeners stay open until stdin closes, so slower peers can still reach them.
import errno
import json
import os
import socket
import sys
import threading
import time

HELD = []


def listen(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        s.listen(128)
    except OSError as exc:
        s.close()
        return {"want": port, "port": port, "error": exc.strerror or str(exc)}
    HELD.append(s)
    threading.Thread(target=accept_forever, args=(s,), daemon=True).start()
    return {"want": port, "port": s.getsockname()[1], "error": ""}


def accept_forever(s):
    while True:
        try:
            conn, _ = s.accept()
            conn.close()
        except OSError:
            return


def dial(target, timeout, out):
    started = time.time()
    state, error = "ok", ""
    try:
        socket.create_connection((target["ip"], int(target["port"])), timeout=timeout).close()
    except socket.timeout:
        state, error = "filtered", "no answer within %gs (packets dropped)" % timeout
    except ConnectionRefusedError:
        state, error = "refused", "connection refused"
    except socket.gaierror as exc:
        state, error = "no_route", "cannot resolve %s: %s" % (target["ip"], exc.strerror)
    except OSError as exc:
        quick = time.time() - started < 1.0
        if exc.errno == errno.EHOSTUNREACH and quick:
            # an immediate "no route" is an ICMP reject (firewalld's icmp-host-prohibited)
            state, error = "refused", "rejected (%s)" % exc.strerror
        elif exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            state, error = "no_route", exc.strerror
        else:
            state, error = "error", exc.strerror or str(exc)
    link = dict(target)
    link.update(state=state, error=error, ms=round((time.time() - started) * 1000, 1))
    out.append(link)


def probe(msg):
    namespace = {"__name__": "ddpkit_probe"}
    exec(compile(msg["source"], "probe.py", "exec"), namespace)
    return {"probe": namespace["collect"](*msg["args"])}


def call(msg):
    """Run module:function(**kwargs) from this interpreter's own ddpkit; its result's to_dict()."""
    module, _, func = msg["target"].partition(":")
    try:
        fn = getattr(__import__(module, fromlist=[func]), func)
    except (ImportError, AttributeError) as exc:
        return {"result": None, "error": str(exc)}
    try:
        return {"result": fn(**msg.get("kwargs", {})).to_dict()}
    except Exception as exc:  # a bug there must not end the session
        return {"result": None, "error": "%s failed: %s: %s" % (func, type(exc).__name__, exc)}


def answer(msg):
    op = msg.get("op")
    if op == "probe":
        return probe(msg)
    if op == "call":
        return call(msg)
    if op == "listen":
        return {"listening": [listen(int(p)) for p in msg.get("ports", [])]}
    if op == "dial":
        links, threads = [], []
        for target in msg.get("targets", []):
            t = threading.Thread(target=dial, args=(target, float(msg.get("timeout", 3)), links))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
        return {"links": links}
    return {"error": "unknown op %r" % op}


def become(argv):
    """Hand this session (stdin, stdout, stderr) to another program: the launcher sends
    nothing more until it reads the reply, so no input is left in our buffers."""
    sys.stdout.write(json.dumps({"became": True}) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + [str(a) for a in argv])


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = None
        try:
            msg = json.loads(line)
            if msg.get("op") == "become":
                become(msg.get("argv", []))
            reply = answer(msg)
        except Exception as exc:  # report, never die silently: the launcher waits for a line
            reply = {"error": "%s: %s" % (type(exc).__name__, exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


main()
