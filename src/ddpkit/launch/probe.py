"""Ask every node, in parallel, what the plan needs: addresses, GPUs, interpreter, script.

One SSH round trip per node running nodeside/probe.py with the run's interpreter. Failures are
classified so the user reads which node, what went wrong and the fix, before anything starts.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
from dataclasses import dataclass

from ddpkit.i18n import _
from ddpkit.launch.agents import Agents
from ddpkit.launch.hosts import Host
from ddpkit.launch.plan import Addr, NodeFacts
from ddpkit.launch.remote import Reply, SshOptions, describe_ssh_failure, ssh_hostname
from ddpkit.nodeside import source

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "localhost.localdomain")


@dataclass(frozen=True)
class NodeProblem:
    host: Host
    kind: str  # ssh kinds (auth, host_key, ...) | python | torch | workdir | script | probe
    message: str
    fix: str
    usage: bool = False  # the command line is wrong (exit 2), not the node (exit 1)

    def to_dict(self) -> dict:
        return {"host": self.host.name, "kind": self.kind, "message": self.message, "fix": self.fix}


@dataclass(frozen=True)
class Probe:
    host: Host
    facts: NodeFacts | None
    problem: NodeProblem | None
    info: dict


def local_addresses() -> set[str]:
    import psutil

    return {a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)}


def is_local(host: Host, here: set[str]) -> bool:
    """Run on this machine without SSH: localhost, our hostname, or one of our addresses."""
    if host.user:
        return False
    name = host.name
    if name in LOCAL_NAMES or name in (socket.gethostname(), socket.gethostname().split(".")[0]):
        return True
    try:
        return ipaddress.ip_address(name).exploded in {ipaddress.ip_address(a.split("%")[0]).exploded
                                                        for a in here}
    except ValueError:
        return False


def local_flags(hosts: list[Host]) -> list[bool]:
    here = local_addresses()
    return [is_local(h, here) for h in hosts]


def probe_with(agents: Agents, ssh: SshOptions, python: str, workdir: str, script: str,
               module: bool | str, timeout: float = 30, need: tuple[str, ...] = ()) -> list[Probe]:
    """Every node answers the probe over its agent session, in parallel. `need`: modules the
    run imports on every node (accelerate, ...)."""
    args = [workdir, script, _kind(module), ",".join(need)]
    replies = agents.ask([{"op": "probe", "source": source("probe"), "args": args}
                          for _unused in agents.hosts], timeout)
    out = []
    for i, (host, got) in enumerate(zip(agents.hosts, replies)):
        if got is not None and "probe" in got:
            reply = Reply(host, 0, json.dumps(got["probe"]), "")
        elif got is not None:
            reply = Reply(host, 1, "", got.get("error", _("agent error")))
        else:
            reply = agents.ended[i] or Reply(host, None, "", _("no answer"))
        out.append(_judge(host, reply, agents.local[i], python, workdir, script, ssh))
    return out


def _kind(module: bool | str) -> str:
    """The entry point's kind: file (a Python script), module (-m), exec (--no-python)."""
    return module if isinstance(module, str) else ("module" if module else "file")


def probe_here(host: Host, workdir: str, script: str, module: bool | str,
               need: tuple[str, ...] = ()) -> Probe:
    """The local node with this interpreter: no subprocess, no SSH."""
    namespace: dict = {"__name__": "ddpkit_probe"}
    exec(compile(source("probe"), "nodeside/probe.py", "exec"), namespace)
    info = namespace["collect"](workdir, script, _kind(module), ",".join(need))
    return _judge(host, Reply(host, 0, json.dumps(info), ""), True, sys.executable, workdir,
                  script, SshOptions())


def _judge(host, reply, is_here, python, workdir, script, ssh) -> Probe:
    if reply.returncode is None:
        return Probe(host, None, NodeProblem(host, "timeout", _('no answer within the probe timeout ({stderr})').format(stderr=reply.stderr),
                                             _('check that {name} is up and not overloaded').format(name=host.name)), {})
    if reply.returncode == 255 and not is_here:
        fail = describe_ssh_failure(reply.stderr, host)
        return Probe(host, None, NodeProblem(host, fail.kind, fail.message, fail.fix), {})
    if reply.returncode != 0:
        text = reply.stderr.strip()
        if reply.returncode == 127 or "No such file or directory" in text:
            return Probe(host, None, NodeProblem(
                host, "python", _('interpreter {python} not found').format(python=python),
                _('give --python PATH (the Python with torch on {name}), or create the same environment at that path on every node').format(name=host.name)), {})
        said = (_('probe failed: {last}').format(last=text.splitlines()[-1]) if text
                else _('probe failed: exit code {code}').format(code=reply.returncode))
        return Probe(host, None, NodeProblem(host, "probe", said,
                                             _("run '{python} -c pass' on {name}").format(python=python, name=host.name)), {})
    try:
        info = json.loads(reply.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return Probe(host, None, NodeProblem(host, "probe", _('unreadable probe output'),
                                             _('check what the login shell of {name} prints').format(name=host.name)), {})
    facts = NodeFacts(hostname=info.get("hostname", ""),
                      addrs=tuple(Addr(i, c) for i, c in info.get("addrs", [])),
                      gpus=int(info.get("gpus", 0)), cpus=int(info.get("cpus", 0)),
                      local=is_here,
                      ssh_hostname="" if is_here else ssh_hostname(host, ssh))
    problem = None
    if not info.get("torch"):
        problem = NodeProblem(host, "torch", _('torch is not installed for {get}').format(get=info.get('executable', python)),
                              _('{python} -m pip install torch (on {name})').format(python=python, name=host.name))
    elif not info.get("workdir_ok"):
        problem = NodeProblem(host, "workdir", _('working directory {workdir} does not exist').format(workdir=workdir),
                              _('give --workdir DIR, or keep the code on a filesystem every node mounts'))
    elif info.get("missing"):
        missing = ", ".join(info["missing"])
        problem = NodeProblem(host, "module", _('{missing} not installed for {get}').format(missing=missing, get=info.get('executable', python)),
                              _('{python} -m pip install {info} (on {name})').format(python=python, info=' '.join(info['missing']), name=host.name))
    elif info.get("exec_problem"):
        problem = NodeProblem(host, "script", f"{script}: {info['exec_problem']}",
                              info.get("exec_fix", "check the path"), usage=True)
    elif not info.get("script_ok"):
        problem = NodeProblem(host, "script", _('script {script} not found in {workdir}').format(script=script, workdir=workdir),
                              _('check the path; every node needs the script at the same place'),
                              usage=True)
    return Probe(host, facts, problem, info)


