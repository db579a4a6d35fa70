"""Pure planning: hosts + options + node facts -> the exact torchrun command for every node.

Nothing here touches the network or starts a process; `ddpkit launch --dry-run` prints what
this module returns, and the supervisor runs exactly that.
"""

from __future__ import annotations

import ipaddress
import shlex
from dataclasses import dataclass, field
from typing import Mapping

from ddpkit.errors import UsageError
from ddpkit.i18n import _
from ddpkit.launch.envvars import forwarded_env, mask_args, mask_value
from ddpkit.launch.hosts import Host
from ddpkit.parsers.ifaces import VIRTUAL_IFACE

# torchrun prefixes each worker line with this, so every line can be labelled with its rank.
# Not "[N]:": torchrun's own failure summary prints lines like "[0]:".
LINE_PREFIX_TEMPLATE = "[rank${rank}]:"
ENGINES = ("torchrun", "accelerate", "horovod")
# Workers run the script through nodeside/bootstrap.py, written here on each node (README "Exit
# status you can trust"): it runs the script as __main__ and ends the process group before
# the interpreter shuts down. --no-bootstrap or DDPKIT_NO_BOOTSTRAP=1 runs the script directly.
BOOTSTRAP = "@TMP@/ddpkit_bootstrap.py"
# torchrun runs as nodeside/torchrun.py, written here on each node: torch.distributed.run itself,
# with its tee reading each rank's log to the end (a rank's last lines are lost otherwise,
# pytorch/pytorch#143823); `-m accelerate.commands.launch` after it: accelerate's, whose agent
# is torchrun's in its own process. Named torchrun, so that `ddpkit stacks` knows the agent.
TORCHRUN = "@TMP@/bin/torchrun"
LOGS = "@TMP@/logs"  # torchrun's per-rank files, in the node's run folder the guard removes
# torchrun's --nproc-per-node words, resolved per node from the probe (torch/distributed/run.py
# determine_local_world_size): gpu = GPUs, cpu = CPUs, auto = GPUs if any, else CPUs.
NPROC_WORDS = ("gpu", "cpu", "auto")


@dataclass(frozen=True)
class Addr:
    iface: str
    cidr: str  # "10.0.0.5/24"

    @property
    def ip(self) -> str:
        return self.cidr.split("/")[0]

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.ip_interface(self.cidr).network


@dataclass(frozen=True)
class NodeFacts:
    """What the preflight probe learnt about one node (see probe.py)."""

    hostname: str = ""
    addrs: tuple[Addr, ...] = ()
    gpus: int = 0
    local: bool = False
    ssh_hostname: str = ""  # the address ssh connects to (`ssh -G`), "" for the local node
    cpus: int = 0  # CPUs this process may use (sched_getaffinity), for --nproc-per-node cpu
    known: bool = True  # False: not probed (--no-preflight) or unreachable (a dry run shows it)
    unreachable: bool = False  # the probe could not reach it: its address is unknown


@dataclass(frozen=True)
class LaunchOptions:
    script: str
    script_args: tuple[str, ...] = ()
    module: bool = False
    nproc_per_node: int | str | None = None  # None: slots, else 1; or gpu | cpu | auto
    port: int = 29500
    fixed_port: bool = False  # chosen by the user: a one-node run uses it instead of a free one
    no_python: bool = False  # the entry point is an executable (torchrun --no-python)
    max_restarts: int = 0
    python: str = "python3"
    workdir: str = "."
    run_id: str = "ddpkit"
    env_names: tuple[str, ...] = ()  # -x NAME: forward this variable's value from here
    env_pairs: tuple[tuple[str, str], ...] = ()  # --env NAME=VALUE
    rdzv_timeout: int | None = None  # seconds nodes wait for each other at the rendezvous
    engine: str = "torchrun"  # torchrun | accelerate (per node) | horovod (horovodrun, here)
    bootstrap: bool = True  # run the script through BOOTSTRAP (not with --no-python, horovodrun)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise UsageError(_('--engine {engine}: unknown').format(engine=self.engine), _('choose from {engines}').format(engines=', '.join(ENGINES)))
        if not 1 <= self.port <= 65535:
            raise UsageError(_('--port {port} is not a TCP port').format(port=self.port), _('use a number from 1 to 65535'))
        if isinstance(self.nproc_per_node, str) and self.nproc_per_node not in NPROC_WORDS:
            raise UsageError(_('--nproc-per-node {nproc_per_node}: not a number or {nproc_words}').format(nproc_per_node=self.nproc_per_node, nproc_words=', '.join(NPROC_WORDS)), _('e.g. --nproc-per-node 4 or gpu'))
        if isinstance(self.nproc_per_node, int) and self.nproc_per_node < 1:
            raise UsageError(_('--nproc-per-node {nproc_per_node} must be at least 1').format(nproc_per_node=self.nproc_per_node),
                             _('e.g. --nproc-per-node 4 (one process per GPU)'))
        if self.max_restarts < 0:
            raise UsageError(_('--max-restarts must be 0 or more'), _('e.g. --max-restarts 1'))
        if self.no_python and self.module:
            raise UsageError(_('--no-python and -m exclude each other (as in torchrun)'),
                             _('-m runs a Python module; --no-python runs an executable'))
        if self.no_python and self.engine != "torchrun":
            raise UsageError(_('--no-python works with --engine torchrun, not {engine}').format(engine=self.engine),
                             _('drop --engine, or run a Python script'))


@dataclass(frozen=True)
class NodePlan:
    host: Host
    node_rank: int
    nproc: int
    local: bool
    argv: tuple[str, ...]  # torchrun command, run in workdir with env on top of the node's own
    env: Mapping[str, str]
    workdir: str
    ifname: str = ""
    clean_env: bool = False  # start from a minimal environment, not the node's (horovodrun)

    def shell(self, masked: bool = True) -> str:
        """The command to paste on this node: cd, env, torchrun."""
        env = [f"{k}={mask_value(k, v) if masked else v}" for k, v in sorted(self.env.items())]
        argv = mask_args(list(self.argv)) if masked else list(self.argv)
        parts = ["cd", shlex.quote(self.workdir), "&&"]
        if env:
            parts += ["env", *[shlex.quote(e) for e in env]]
        return " ".join(parts + [shlex.join(argv)])


@dataclass(frozen=True)
class Plan:
    nodes: tuple[NodePlan, ...]
    master_addr: str
    port: int
    run_id: str
    standalone: bool
    notes: tuple[str, ...] = field(default_factory=tuple)  # what the user should know

    @property
    def world_size(self) -> int:
        return sum(n.nproc for n in self.nodes)

    def to_dict(self) -> dict:
        return {
            "run_id": self.run_id, "master_addr": self.master_addr, "port": self.port,
            "world_size": self.world_size, "standalone": self.standalone, "notes": list(self.notes),
            "nodes": [{"host": n.host.to_dict(), "node_rank": n.node_rank, "nproc": n.nproc,
                       "local": n.local, "ifname": n.ifname, "workdir": n.workdir,
                       "argv": mask_args(list(n.argv)),
                       "env": {k: mask_value(k, v) for k, v in sorted(n.env.items())},
                       "command": n.shell()} for n in self.nodes],
        }


def choose_network(facts: list[NodeFacts]) -> tuple[str, list[str], str]:
    """(master address, per-node interface, note) from the subnet every node shares.

    Prefers the subnet holding the first node's SSH address (the one the user named), then
    physical-looking interfaces over bridges and virtual ones. ('', ['']*n, why) when no
    subnet is shared by all nodes."""
    per_node = [[a for a in f.addrs if not ipaddress.ip_address(a.ip).is_loopback] for f in facts]
    if not per_node or any(not addrs for addrs in per_node):
        bad = [facts[i].hostname or f"node {i}" for i, a in enumerate(per_node) if not a]
        return "", [""] * len(facts), _("no non-loopback IPv4 address on {nodes}").format(
            nodes=", ".join(bad))
    shared = set.intersection(*({a.network for a in addrs} for addrs in per_node))
    if not shared:
        return "", [""] * len(facts), _("the nodes share no IPv4 subnet")
    first = facts[0]

    def rank(net: ipaddress.IPv4Network) -> tuple:
        mine = [a for a in per_node[0] if a.network == net]
        named = any(a.ip == first.ssh_hostname for a in mine)
        virtual = any(VIRTUAL_IFACE.match(a.iface) for addrs in per_node for a in addrs
                      if a.network == net)
        return (not named, virtual, -net.prefixlen, str(net))

    net = min(shared, key=rank)
    master = next(a.ip for a in per_node[0] if a.network == net)
    ifaces = [next(a.iface for a in addrs if a.network == net) for addrs in per_node]
    return master, ifaces, ""


def make_plan(hosts: list[Host], opts: LaunchOptions, environ: Mapping[str, str],
              facts: list[NodeFacts]) -> Plan:
    if len(facts) != len(hosts):
        raise ValueError("one NodeFacts per host")
    standalone = len(hosts) == 1
    base_env = _base_env(opts, environ, standalone)
    master, ifaces, notes = _rendezvous(hosts, facts, standalone)
    nprocs = [node_nproc(opts.nproc_per_node, h, f) for h, f in zip(hosts, facts)]
    if opts.engine != "torchrun" and 0 in nprocs:
        raise UsageError(_("--nproc-per-node {nproc_per_node} needs the preflight's GPU and CPU counts with --engine {engine}").format(nproc_per_node=opts.nproc_per_node, engine=opts.engine), _('give a number'))
    if opts.engine == "horovod":
        return _horovodrun_plan(hosts, nprocs, opts, base_env, master, notes)
    if opts.engine == "accelerate" and len(set(nprocs)) > 1:
        raise UsageError(_('--engine accelerate needs the same number of processes on every node (got {str})').format(str=', '.join(map(str, nprocs))), _('give every host the same slots'))
    nodes = []
    for rank, (host, fact, ifname) in enumerate(zip(hosts, facts, ifaces)):
        if opts.engine == "accelerate":
            argv = _accelerate_argv(opts, len(hosts), rank, nprocs[rank], master)
        else:
            local_addr = next((a.ip for a in fact.addrs if a.iface == ifname), "")
            if fact.unreachable:
                local_addr = unknown_addr(host)
            nproc = str(nprocs[rank] or opts.nproc_per_node)  # unknown counts: torchrun's word
            argv = _torchrun_argv(opts, len(hosts), rank, nproc, master, local_addr)
        nodes.append(NodePlan(host=host, node_rank=rank, nproc=nprocs[rank], local=fact.local,
                              argv=tuple(argv), env=_node_env(base_env, ifname),
                              workdir=opts.workdir, ifname=ifname))
    return Plan(nodes=tuple(nodes), master_addr=master, port=opts.port, run_id=opts.run_id,
                standalone=standalone, notes=tuple(notes))


def node_nproc(spec: int | str | None, host: Host, facts: NodeFacts) -> int:
    """Processes on one node: a number, the host's slots, or torchrun's word resolved from
    what the probe counted (0: not probed, torchrun resolves the word on the node)."""
    if spec is None:
        return host.slots or 1
    if isinstance(spec, int):
        return spec
    if not facts.known:
        return 0
    if spec == "gpu" and not facts.gpus:
        raise UsageError(_('--nproc-per-node gpu: {name} has no NVIDIA GPU').format(name=host.name),
                         _('give a number, or --nproc-per-node auto (GPUs if any, else CPUs)'))
    if spec == "gpu" or (spec == "auto" and facts.gpus):
        return facts.gpus
    return facts.cpus or 1


def unknown_addr(host: Host) -> str:
    """How a plan shows an address that only the probe could have found."""
    return f"<address of {host.name}>"


def _base_env(opts: LaunchOptions, environ: Mapping[str, str], standalone: bool) -> dict:
    env = forwarded_env(environ, opts.env_names, opts.env_pairs)
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = LINE_PREFIX_TEMPLATE
    if opts.max_restarts:
        # Measured here (torch 2.13, c10d, Gloo): after a restart the workers of the new round
        # fail in Gloo's connectFullMesh ("Connection refused") while they share the
        # rendezvous TCPStore, and on one node (--standalone) the round after that hangs
        # forever; with a store of their own, as before torch 2.4, restarts work everywhere.
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    return env


def _rendezvous(hosts: list[Host], facts: list[NodeFacts],
                standalone: bool) -> tuple[str, list[str], list[str]]:
    """The master address every node dials, each node's interface, and notes for the user."""
    if standalone:
        return "127.0.0.1", [""], []
    notes: list[str] = []
    if not all(f.known for f in facts):
        return _rendezvous_unknown(hosts, facts)
    master, ifaces, why = choose_network(facts)
    if not master:
        master = facts[0].ssh_hostname or hosts[0].name
        notes.append(_("{why}: using {master} as the rendezvous address").format(why=why,
                                                                               master=master))
        if master in ("localhost", "localhost.localdomain"):
            raise UsageError(_("the first host is '{master}', which other nodes cannot reach").format(master=master),
                             _('name the first host by its cluster address in -H (its IP or a name every node resolves)'))
    if _is_ip(master) and ipaddress.ip_address(master).is_loopback:
        raise UsageError(_('the first host {name} resolves to loopback {master}').format(name=hosts[0].name, master=master),
                         _('name the hosts by their cluster addresses (never 127.x) in -H'))
    return master, ifaces, notes


def _rendezvous_unknown(hosts: list[Host],
                        facts: list[NodeFacts]) -> tuple[str, list[str], list[str]]:
    """Some nodes were not probed. Unreachable ones (a dry run) show their addresses as
    unknown; with --no-preflight the nodes dial the first host by the name given."""
    known = [i for i, f in enumerate(facts) if f.known]
    master, ifaces = "", [""] * len(facts)
    if len(known) > 1 and facts[0].known:
        sub_master, sub_ifaces, _unused = choose_network([facts[i] for i in known])
        master = sub_master
        for i, iface in zip(known, sub_ifaces):
            ifaces[i] = iface
    if not master and facts[0].unreachable:
        master = unknown_addr(hosts[0])
    if not master:
        master = facts[0].ssh_hostname or hosts[0].name
    if any(f.unreachable for f in facts):
        note = _('the preflight could not reach every node: <...> marks what it would have found')
    else:
        note = (_('nodes not probed (--no-preflight): they dial {master}; GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME and --local-addr are not set for them').format(master=master))
    return master, ifaces, [note]


def _node_env(base_env: dict, ifname: str) -> dict:
    env = dict(base_env)
    if ifname:
        # Gloo and NCCL otherwise pick the address the hostname resolves to, which is
        # loopback on many distributions; pin both to the interface on the shared subnet.
        env.setdefault("GLOO_SOCKET_IFNAME", ifname)
        env.setdefault("NCCL_SOCKET_IFNAME", ifname)
    return env


def _torchrun_argv(opts: LaunchOptions, nnodes: int, rank: int, nproc: str, master: str,
                   local_addr: str) -> list[str]:
    argv = [opts.python, TORCHRUN, "--nnodes", str(nnodes),
            "--nproc-per-node", nproc]
    if nnodes == 1 and not opts.fixed_port:
        argv += ["--standalone"]  # a free port of its own: runs side by side never collide
    elif nnodes == 1:  # the port the user asked for (--port, MASTER_PORT)
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{opts.port}",
                 "--rdzv-id", opts.run_id]
    else:
        argv += ["--node-rank", str(rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"{_host_for_url(master)}:{opts.port}",
                 "--rdzv-id", opts.run_id, "--rdzv-conf", _rdzv_conf(rank == 0, opts.rdzv_timeout)]
        if local_addr:
            # The address this node publishes to the others (else its FQDN, often loopback).
            argv += ["--local-addr", local_addr]
    # the tee needs a log directory; left to itself torchrun leaves one in /tmp per run
    argv += ["--max-restarts", str(opts.max_restarts), "--tee", "3", "--log-dir", LOGS]
    if opts.module and not _bootstrapped(opts):
        argv += ["--module"]
    if opts.no_python:
        argv += ["--no-python"]
    # "--" keeps torchrun from taking the script's own options (--max is "ambiguous" else)
    return argv + ["--", *_entry(opts)]


def _bootstrapped(opts: LaunchOptions) -> bool:
    return opts.bootstrap and not opts.no_python and opts.engine != "horovod"


def _entry(opts: LaunchOptions) -> list[str]:
    """What the launcher runs in each worker: the bootstrap with the script (or -m module)
    after it, or the script itself."""
    if not _bootstrapped(opts):
        return [opts.script, *opts.script_args]
    return [BOOTSTRAP, *(["-m"] if opts.module else []), opts.script, *opts.script_args]


def _accelerate_argv(opts: LaunchOptions, nnodes: int, rank: int, nproc: int,
                     master: str) -> list[str]:
    """`accelerate launch` for one node; it runs torchrun in-process (static rendezvous)."""
    total = nproc * nnodes
    argv = [opts.python, TORCHRUN, "-m", "accelerate.commands.launch", "--num_machines", str(nnodes),
            "--machine_rank", str(rank), "--num_processes", str(total),
            "--main_process_port", str(opts.port), "--mixed_precision", "no",
            "--dynamo_backend", "no", "--max_restarts", str(opts.max_restarts), "--tee", "3",
            "--log_dir", LOGS]
    if nnodes > 1:
        argv += ["--main_process_ip", master, "--same_network"]
    if total > 1:
        argv += ["--multi_gpu"]  # on CPU too: without it accelerate starts one plain process
    if opts.module and not _bootstrapped(opts):
        argv += ["--module"]
    return argv + _entry(opts)


def _horovodrun_plan(hosts: list[Host], nprocs: list[int], opts: LaunchOptions,
                     env: dict[str, str], master: str, notes: list[str]) -> Plan:
    """Real Horovod: one horovodrun on this machine, which starts every node itself over SSH."""
    # horovodrun takes no user@: users come from ~/.ssh/config, as for ssh itself
    spec = ",".join(f"{'localhost' if len(hosts) == 1 else h.name}:{n}"
                    for h, n in zip(hosts, nprocs))
    argv = [opts.python, "-m", "horovod.runner.launch", "-np", str(sum(nprocs)), "-H", spec,
            "--gloo", "--gloo-timeout-seconds", str(opts.rdzv_timeout or 60)]
    if len(hosts) > 1:
        argv += ["--network-interface", env.get("GLOO_SOCKET_IFNAME", "")] \
            if env.get("GLOO_SOCKET_IFNAME") else []
    argv += [opts.python, *(["-m"] if opts.module else []), opts.script, *opts.script_args]
    # horovodrun copies its whole environment onto every node's ssh command line: give it
    # only what a run needs (clean_env) plus the forwarded variables.
    node = NodePlan(host=Host("localhost"), node_rank=0, nproc=sum(nprocs), local=True,
                    argv=tuple(argv), env=env, workdir=opts.workdir, clean_env=True)
    return Plan(nodes=(node,), master_addr=master, port=opts.port, run_id=opts.run_id,
                standalone=True, notes=tuple(notes + [_("horovodrun starts the other nodes "
                                                        "itself (its own SSH and teardown)")]))


def _rdzv_conf(is_host: bool, timeout: int | None) -> str:
    conf = [f"is_host={'1' if is_host else '0'}"]
    if timeout:
        conf.append(f"join_timeout={timeout}")
    return ",".join(conf)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _host_for_url(addr: str) -> str:
    return f"[{addr}]" if ":" in addr else addr
