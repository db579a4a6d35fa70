"""ddpkit bench: nccl-tests, in Python, on NCCL or Gloo, across the cluster in one command."""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys

from ddpkit.cli.common import (
    add_host_arguments,
    add_run_arguments,
    add_ssh_arguments,
    err,
    hosts_from,
    port_from,
    ssh_options,
    writable_dir,
    writable_file,
)
from ddpkit.cli.habits import nproc_value
from ddpkit.errors import EnvironmentFailure, ExitCode, UsageError
from ddpkit.i18n import _

PREFIX = re.compile(r"^DDPKIT_BENCH_(HEADER|ROW|PAIR) (.*)$")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    nt = parser.add_argument_group(_('nccl-tests flags (same names; same defaults except -a)'))
    nt.add_argument("-b", "--minbytes", default="32M", help=_('smallest size (default 32M)'))
    nt.add_argument("-e", "--maxbytes", default="32M", help=_('largest size (default 32M)'))
    step = nt.add_mutually_exclusive_group()
    step.add_argument("-i", "--stepbytes", default="1M", help=_('fixed increment (default 1M)'))
    step.add_argument("-f", "--stepfactor", type=int, default=0, help=_('multiplication factor'))
    nt.add_argument("-n", "--iters", type=int, default=20, help=_('timed iterations (default 20)'))
    nt.add_argument("-w", "--warmup_iters", type=int, default=1, help=_('warm-up iterations (default 1)'))
    nt.add_argument("-c", "--check", type=int, default=1, help=_('checked iterations (default 1; 0 = off)'))
    nt.add_argument("-o", "--op", dest="redop", default="sum", help="sum|prod|min|max|avg|all")
    nt.add_argument("-d", "--datatype", default="float",
                    help="float|half|bfloat16|double|int8|uint8|int32|int64|all")
    nt.add_argument("-r", "--root", type=int, default=0, help=_('root of broadcast/reduce (default 0)'))
    nt.add_argument("-a", "--average", type=int, default=3, choices=(0, 1, 2, 3),
                    help=_("time across ranks: 0=rank 0, 1=mean, 2=min, 3=max (default 3, the slowest rank; nccl-tests' default is 1)"))
    nt.add_argument("-g", "--ngpus", type=int, default=1, metavar="N",
                    help=_('GPUs per thread: 1 (ddpkit runs one process per GPU)'))
    nt.add_argument("-t", "--nthreads", type=int, default=1, metavar="N",
                    help=_('threads per process: 1 (ddpkit runs one process per GPU)'))
    d = parser.add_argument_group("ddpkit")
    d.add_argument("--collective", "--ops", dest="ops", default="all_reduce",
                   help=_('comma list of all_reduce,all_gather,reduce_scatter,broadcast,reduce,all_to_all,send_recv, or all (default all_reduce)'))
    d.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help=_('NCCL with GPUs, Gloo otherwise (default auto)'))
    d.add_argument("--nproc-per-node", "--nproc_per_node", type=nproc_value, metavar="N",
                   help=_('processes per node (default: one per GPU; else 2 on one node, 1 per node)'))
    d.add_argument("--json-file", "--json-out", dest="json_file", metavar="FILE",
                   help=_('write the results as JSON'))
    d.add_argument("--plot", metavar="FILE.png", help=_('plot busbw against size (needs matplotlib)'))
    d.add_argument("--min-busbw", type=float, metavar="GBPS",
                   help=_("exit 1 when an op's average bus bandwidth is below this"))
    d.add_argument("--pairs", action="store_true",
                   help=_('point-to-point bandwidth between every pair of nodes instead'))
    d.add_argument("--pairs-size", default="4M", help=_('message size for --pairs (default 4M)'))
    d.add_argument("--pairs-iters", type=int, default=5, help=_('exchanges per pair (default 5)'))
    add_run_arguments(d)
    d.add_argument("--corrupt", metavar="OP", help=argparse.SUPPRESS)  # tests: spoil a result
    add_ssh_arguments(parser)


def config_from(args: argparse.Namespace) -> dict:
    from ddpkit.nodeside.bench_job import OPS, REDOPS, TYPE_ALIASES, TYPES, sizes
    from ddpkit.verify.bench.table import parse_size

    lo, hi = parse_size(args.minbytes, "-b"), parse_size(args.maxbytes, "-e")
    if lo > hi:
        raise UsageError(_('-b {minbytes} is larger than -e {maxbytes}').format(minbytes=args.minbytes, maxbytes=args.maxbytes), _('swap them'))
    if args.stepfactor == 1 or args.stepfactor < 0:
        raise UsageError(_('-f {stepfactor} must be 2 or more').format(stepfactor=args.stepfactor), "e.g. -f 2")
    step = parse_size(args.stepbytes, "-i")
    if not args.stepfactor and step < 1:
        raise UsageError(_('-i must be at least 1 byte'), "e.g. -i 1M")
    if args.ngpus != 1 or args.nthreads != 1:
        per = args.ngpus * args.nthreads
        raise UsageError(_("-g {ngpus} -t {nthreads}: ddpkit runs one process per GPU (nccl-tests' -g 1 -t 1)").format(ngpus=args.ngpus, nthreads=args.nthreads),
                         _('for {per} GPUs a node: -H node0:{per},node1:{per} or --nproc-per-node {per}').format(per=per))
    for flag, value in (("-n", args.iters), ("-w", args.warmup_iters), ("-c", args.check)):
        if value < (1 if flag == "-n" else 0):
            raise UsageError(_('{flag} {value} is out of range').format(flag=flag, value=value), f"e.g. {flag} 20")
    ops = list(OPS) if args.ops == "all" else [o.strip() for o in args.ops.split(",")]
    for op in ops:
        if op not in OPS:
            raise UsageError(_("--collective: unknown collective '{op}'").format(op=op), _('choose from {ops}, all').format(ops=', '.join(OPS)))
    redops = list(REDOPS) if args.redop == "all" else [args.redop]
    if redops[0] not in REDOPS:
        raise UsageError(_('-o {redop}: unknown reduction').format(redop=args.redop), _('choose from {redops}, all').format(redops=', '.join(REDOPS)))
    types = list(TYPES) if args.datatype == "all" else [TYPE_ALIASES.get(args.datatype, args.datatype)]
    if types[0] not in TYPES:
        raise UsageError(_('-d {datatype}: unknown type').format(datatype=args.datatype), _('choose from {types}, all').format(types=', '.join(TYPES)))
    return {"backend": args.backend, "ops": ops, "types": types, "redops": redops,
            "sizes": sizes(lo, hi, step, args.stepfactor), "min_bytes": lo, "max_bytes": hi,
            "step": args.stepfactor or step, "factor": bool(args.stepfactor),
            "iters": args.iters, "warmup": args.warmup_iters, "check": args.check,
            "root": args.root, "average": args.average, "corrupt": args.corrupt,
            "pairs": args.pairs, "pair_size": parse_size(args.pairs_size, "--pairs-size"),
            "pair_iters": max(1, args.pairs_iters)}


class TableWriter:
    """Prints nccl-tests' table as rows arrive: a header per collective, a footer after it."""

    def __init__(self, cfg: dict, out) -> None:
        self.cfg, self.out = cfg, out
        self.info: dict = {}
        self.rows: list[dict] = []
        self.current: list[dict] = []
        self.pairs: list[dict] = []

    def handle(self, kind: str, obj: dict) -> None:
        if kind == "HEADER":
            self.info = obj
        elif kind == "PAIR":
            self.pairs.append(obj)
        elif kind == "ROW":
            from ddpkit.verify.bench.table import Header, header_lines, row_line

            if not self.current or self.current[-1]["op"] != obj["op"]:
                self.close_op()
                c = self.cfg
                h = Header(op=obj["op"], backend=self.info.get("backend", "?"),
                           world_size=self.info.get("world_size", 0), min_bytes=c["min_bytes"],
                           max_bytes=c["max_bytes"], step=c["step"], factor=c["factor"],
                           warmup=c["warmup"], iters=c["iters"], check=c["check"],
                           hosts=tuple(self.info.get("hosts", ())))
                self._print(*header_lines(h))
            self.current.append(obj)
            self.rows.append(obj)
            self._print(row_line(obj))

    def close_op(self) -> None:
        from ddpkit.verify.bench.table import footer_lines

        if self.current:
            self._print(*footer_lines(self.current, self.cfg.get("min_busbw")))
            self.current = []

    def _print(self, *lines: str) -> None:
        for line in lines:
            self.out.write(line + "\n")
        self.out.flush()


def run(args: argparse.Namespace) -> int:
    from ddpkit.cli.launch import report_problems, supervise
    from ddpkit.launch.launcher import PreflightError, prepare
    from ddpkit.launch.plan import LaunchOptions
    from ddpkit.nodeside import source

    cfg = config_from(args)
    cfg["min_busbw"] = args.min_busbw
    writable_file(args.json_file, "--json-file")
    writable_file(args.plot, "--plot")
    writable_dir(args.log_dir, "--log-dir")
    if args.plot:
        _need_matplotlib()
    hosts, _unused = hosts_from(args)
    if args.pairs and len(hosts) < 2:
        raise UsageError(_('--pairs needs at least two hosts'), _('e.g. -H node0,node1,node2 --pairs'))
    nproc = 1 if args.pairs else args.nproc_per_node
    port, fixed = port_from(args)
    opts = LaunchOptions(
        script="@TMP@/ddpkit_bench.py", nproc_per_node=nproc, port=port, fixed_port=fixed,
        python=args.python or sys.executable, workdir="/tmp",
        run_id=f"ddpkit-bench-{secrets.token_hex(3)}",
        env_pairs=(("DDPKIT_BENCH", json.dumps({k: v for k, v in cfg.items() if k != "min_busbw"})),))
    single = len(hosts) == 1
    try:
        prepared = prepare(hosts, opts, ssh_options(args), os.environ,
                           slots_for=lambda f: f.gpus or (2 if single else 1))
    except PreflightError as exc:
        report_problems(exc, args.json)
        return int(exc.code)
    need_cuda(args.backend, prepared.probes, opts.python)
    if not 0 <= args.root < prepared.plan.world_size:
        raise UsageError(_('-r {root}: the run has ranks 0 to {world_size}').format(root=args.root, world_size=prepared.plan.world_size - 1),
                         _('choose a root among them, e.g. -r 0'))
    if args.min_busbw is not None and prepared.plan.world_size == 1:
        raise UsageError(_("--min-busbw needs two or more ranks: one rank's bus bandwidth is 0 by definition (nccl-tests' factor 2(n-1)/n)"),
                         _('run two or more: --nproc-per-node 2 on a machine with two GPUs, or -H node0,node1'))
    writer = TableWriter(cfg, sys.stderr if args.json else sys.stdout)

    def collect(host: str, rank: int | None, text: str) -> None:
        m = PREFIX.match(text)
        if m:
            writer.handle(m.group(1), json.loads(m.group(2)))

    files = {"ddpkit_bench.py": source("bench_job"), "ddpkit_objects.py": objects_source()}
    result = supervise(prepared.plan, args, files=files,
                       on_line=collect, hide=PREFIX)
    writer.close_op()
    rank_host = {r: n["host"] for n in result.nodes for r in n["ranks"]}
    return finish(args, cfg, writer, result, rank_host)


def objects_source() -> str:
    """runtime/objects.py as text, for the job's object exchange without numpy (read, not
    imported: the runtime imports torch)."""
    from pathlib import Path

    import ddpkit

    return (Path(ddpkit.__file__).parent / "runtime" / "objects.py").read_text(encoding="utf-8")


def finish(args, cfg, writer, result, rank_host) -> int:
    from ddpkit.verify.bench.table import avg_busbw, wrong_total

    if result.exit_code != 0:
        from ddpkit.cli.launch import show_summary

        show_summary(result)
        return result.exit_code
    report = {"schema": 1, "backend": writer.info.get("backend", ""),
              "world_size": writer.info.get("world_size", 0), "rows": writer.rows,
              "avg_busbw": avg_busbw(writer.rows),
              "avg_busbw_by_op": {op: avg_busbw([r for r in writer.rows if r["op"] == op])
                                  for op in dict.fromkeys(r["op"] for r in writer.rows)}}
    code = ExitCode.OK
    if report["world_size"] == 1:
        # seen on a one-GPU machine: a column of zeros reads as a broken link, it is arithmetic
        err(_("ddpkit bench: one rank: bus bandwidth is 0 by definition (nccl-tests' factor 2(n-1)/n); algbw is the one rank's own speed, and links are measured with two or more ranks"))
    if args.pairs:
        report["pairs"], code = show_pairs(writer.pairs, rank_host, args.json)
    if args.json_file:
        with open(args.json_file, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
    if args.json:
        from ddpkit.render import print_json

        print_json(report)
    if args.plot and writer.rows:
        from ddpkit.verify.bench.plot import plot

        plot(writer.rows, args.plot)
        err(_('ddpkit bench: plot written to {plot}').format(plot=args.plot))
    if wrong_total(writer.rows):
        err(_('ddpkit bench: FAILED: {wrong_total} wrong value(s): the collectives returned wrong data (check drivers, NCCL versions and the network)').format(wrong_total=wrong_total(writer.rows)))
        code = ExitCode.FAILURE
    low = {op: bw for op, bw in report["avg_busbw_by_op"].items()
           if args.min_busbw is not None and bw < args.min_busbw}
    for op, bw in low.items():
        err(_('ddpkit bench: FAILED: {op} average bus bandwidth {bw:.3g} GB/s is below --min-busbw {min_busbw:g}').format(op=op, bw=bw, min_busbw=args.min_busbw))
        code = ExitCode.FAILURE
    return code


def show_pairs(raw: list[dict], rank_host: dict[int, str], json_mode: bool):
    from ddpkit.verify.bench.pairs import judge_pairs, matrix

    pairs = [(rank_host.get(p["a"], p["host_a"]), rank_host.get(p["b"], p["host_b"]), p["gbps"])
             for p in raw]
    hosts = list(dict.fromkeys([h for a, b, _unused in pairs for h in (a, b)]))
    verdict = judge_pairs(pairs, hosts)
    m = matrix(pairs, hosts)
    out = sys.stderr if json_mode else sys.stdout
    if not pairs:
        out.write(_('# no pair was measured (the run ended first)\n'))
        return {"matrix": [], "slow_node": "", "slowest_link": [], "slow_link": False,
                "note": "no pair measured"}, ExitCode.FAILURE
    width = max(8, *(len(h) for h in hosts)) + 2
    out.write(_('# point-to-point bandwidth (GB/s, one direction, {value} B messages)\n').format(value=raw[0]['bytes'] if raw else 0) if raw else "")
    out.write("#" + "".rjust(width - 1) + "".join(h.rjust(width) for h in hosts) + "\n")
    for a in hosts:
        cells = ["-".rjust(width) if a == b else f"{m.get((a, b), 0.0):.3f}".rjust(width)
                 for b in hosts]
        out.write(a.rjust(width) + "".join(cells) + "\n")
    a, b, g = verdict.slowest_link
    out.write(_('# slowest link: {a} <-> {b} {g:.3f} GB/s\n').format(a=a, b=b, g=g))
    out.write(f"# {verdict.note}\n")
    data = {"matrix": [{"a": a, "b": b, "gbps": g} for a, b, g in pairs],
            "slow_node": verdict.slow_node, "slowest_link": list(verdict.slowest_link),
            "slow_link": verdict.slow_link, "note": verdict.note}
    return data, ExitCode.OK


def need_cuda(backend: str, probes, python: str) -> None:
    """--backend nccl needs a CUDA build of torch and a GPU on every node: refuse before the
    job starts (else every rank dies in torch.cuda.set_device)."""
    from ddpkit.prepare.checks.gpu import cuda_wheel_command

    if backend != "nccl":
        return
    for p in probes:
        host, info = p.host.name, p.info
        if info.get("torch") and not info.get("torch_cuda"):
            gpus = "" if p.facts and p.facts.gpus else _(", and {host} has no NVIDIA GPU").format(host=host)
            raise EnvironmentFailure(
                _('--backend nccl: torch {torch} on {host} is a CPU build (no CUDA, so no NCCL){gpus}').format(torch=info['torch'], host=host, gpus=gpus),
                _('use --backend gloo (or auto); for NCCL install a CUDA build of torch: {cuda_wheel_command}').format(cuda_wheel_command=cuda_wheel_command(python=python)))
        if p.facts is not None and not p.facts.gpus:
            raise EnvironmentFailure(_('--backend nccl: {host} has no NVIDIA GPU').format(host=host),
                                     _('use --backend gloo (or auto) on CPU-only nodes'))


def cpu_torch_on_gpus(probes, python: str) -> list[str]:
    """Notes for nodes that have NVIDIA GPUs but a CPU build of torch: a job there runs on the
    CPU with Gloo, which is rarely what the owner of the GPUs wants."""
    from ddpkit.prepare.checks.gpu import cuda_wheel_command

    return [_("{host} has {gpus} NVIDIA GPU(s) but torch {torch} is a CPU build: this runs on "
              "the CPU with Gloo; for the GPUs: {command}").format(
                  host=p.host.name, gpus=p.facts.gpus, torch=p.info["torch"],
                  command=cuda_wheel_command(python=python))
            for p in probes if p.facts and p.facts.gpus and p.info.get("torch")
            and not p.info.get("torch_cuda")]


def _need_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise EnvironmentFailure(_('--plot needs matplotlib, which is not installed'),
                                 _("pip install 'ddpkit[plot]' (or pip install matplotlib)")) from None
