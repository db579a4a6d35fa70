"""`ddpkit lint` rules as tables: each mistake family in a few spellings (must be found, on its
line), the right patterns the issue names (must not be found), shell launch lines, the
mechanical fixes, and the corpus of real scripts (tests/fixtures/lint/corpus.toml)."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ddpkit.data import tomllib
from ddpkit.troubleshoot.lint import KINDS, file_kind, lint_text, rules
from ddpkit.troubleshoot.lint.fixes import apply, unified
from tests.conftest import FIXTURES

LINT = FIXTURES / "lint"


def found(code: str, name: str = "train.py") -> set[tuple[str, int]]:
    return {(f.kind, f.line) for f in lint_text(name, textwrap.dedent(code).lstrip("\n"))}


def kinds(code: str, name: str = "train.py", *, noisy: bool = True) -> set[str]:
    fs = lint_text(name, textwrap.dedent(code).lstrip("\n"))
    return {f.kind for f in fs if noisy or f.severity != "info"}


# (id, code, expected (kind, line) pairs that must be among the findings)
MISTAKES = [
    ("rank from --rank through main()", """
        import argparse, torch.distributed as dist
        def main(rank, world_size):
            dist.init_process_group("nccl", init_method="tcp://10.0.0.1:23456",
                                    world_size=world_size, rank=rank)
        if __name__ == "__main__":
            p = argparse.ArgumentParser()
            p.add_argument("--rank", type=int, required=True)
            p.add_argument("--world-size", type=int, required=True)
            a = p.parse_args()
            main(a.rank, a.world_size)
        """, {("rank_from_args", 10)}),
    ("rank from LOCAL_RANK", """
        import os, torch.distributed as dist
        rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl", rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
        """, {("rank_from_args", 2)}),
    ("world size from device_count", """
        import os, torch
        world_size = torch.cuda.device_count()
        torch.distributed.init_process_group("nccl", world_size=world_size,
                                             rank=int(os.environ["RANK"]))
        """, {("rank_from_args", 2)}),
    ("rank from args.local_rank in the sampler", """
        import argparse, torch
        from torch.utils.data.distributed import DistributedSampler
        p = argparse.ArgumentParser(); p.add_argument("--local_rank", type=int, default=0)
        args = p.parse_args()
        sampler = DistributedSampler(ds, rank=args.local_rank)
        """, {("rank_from_args", 5)}),
    ("required --local_rank", """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, required=True)
        """, {("local_rank_arg", 3)}),
    ("--local-rank used as the device", """
        import argparse, torch
        p = argparse.ArgumentParser()
        p.add_argument("--local-rank", type=int, default=0)
        args = p.parse_args()
        torch.cuda.set_device(args.local_rank)
        """, {("local_rank_arg", 3)}),
    ("deprecated launcher in a subprocess argv", """
        import subprocess, sys
        subprocess.run([sys.executable, "-m", "torch.distributed.launch", "train.py"])
        """, {("deprecated_launcher", 2)}),
    ("no set_epoch", """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler
        dist.init_process_group("gloo")
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(10):
            for x in loader:
                step(x)
        """, {("no_set_epoch", 4), ("no_set_epoch", 7)}),
    ("sampler chosen through a name bound to the class", """
        from torch.utils.data import DataLoader, RandomSampler
        from torch.utils.data.distributed import DistributedSampler
        make = RandomSampler if single else DistributedSampler
        loader = DataLoader(ds, sampler=make(ds))
        """, {("no_set_epoch", 4)}),
    ("shuffle with a sampler", """
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(ds, shuffle=False)
        loader = DataLoader(ds, batch_size=8, shuffle=True, sampler=sampler)
        """, {("shuffle_with_sampler", 3)}),
    ("training loader without a sampler in DDP", """
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        torch.distributed.init_process_group("gloo")
        model = DDP(net)
        train_loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True)
        """, {("shuffle_with_sampler", 5)}),
    ("GPU DDP without set_device or device_ids", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("nccl")
        model = DDP(net.cuda())
        """, {("no_set_device", 3)}),
    ("torch.save on every rank", """
        import torch, torch.distributed as dist
        dist.init_process_group("nccl")
        for epoch in range(3):
            train()
            torch.save(model.state_dict(), "ckpt.pt")
        """, {("unguarded_save", 5)}),
    ("torch.save through a helper called on every rank", """
        import torch, torch.distributed as dist
        def save_checkpoint(state, path="ckpt.pt"):
            torch.save(state, path)
        dist.init_process_group("nccl")
        for epoch in range(3):
            save_checkpoint(model.state_dict())
        """, {("unguarded_save", 3), ("unguarded_save", 6)}),
    ("barrier under rank 0 only", """
        import torch.distributed as dist
        dist.init_process_group("nccl")
        if dist.get_rank() == 0:
            download()
            dist.barrier()
        """, {("rank0_collective_desync", 5)}),
    ("collective after an early return of the other ranks", """
        import torch, torch.distributed as dist
        def log_metrics(t, rank):
            if rank != 0:
                return
            dist.all_reduce(t)
        """, {("rank0_collective_desync", 5)}),
    ("DDP forward in a rank-0 evaluation", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        def evaluate(net, loader):
            return [net(x) for x in loader]
        model = DDP(build().cuda(), device_ids=[0])
        if dist.get_rank() == 0:
            evaluate(model, val_loader)
        """, {("rank0_collective_desync", 7)}),
    ("helper reaching a collective under is_main_process()", """
        import torch.distributed as dist
        def sync(t):
            dist.all_reduce(t)
        def report(t):
            sync(t)
        if is_main_process():
            report(t)
        """, {("rank0_collective_desync", 7)}),
    ("NCCL all_reduce of a CPU tensor", """
        import torch, torch.distributed as dist
        dist.init_process_group(backend="nccl")
        def average(x):
            t = torch.tensor([x])
            dist.all_reduce(t)
            return t.item()
        """, {("nccl_on_cpu", 5)}),
    ("loopback master in a multi-node script", """
        import argparse, os
        p = argparse.ArgumentParser(); p.add_argument("--nodes", type=int, default=2)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        """, {("loopback_master", 3)}),
    ("loopback tcp init in a multi-node script", """
        import argparse, torch.distributed as dist
        p = argparse.ArgumentParser(); p.add_argument("--node_rank", type=int)
        dist.init_process_group("nccl", init_method="tcp://localhost:23456")
        """, {("loopback_master", 3)}),
    ("NCCL names NCCL does not read", """
        import os
        os.environ["NCCL_SOCKET_TIMEOUT"] = "3600"
        os.environ.setdefault("NCCL_TIMEOUT", "600")
        os.environ["NCCL_DEBUG"] = "INFO"
        """, {("fake_nccl_env", 2), ("fake_nccl_env", 3)}),
    ("RANK written from the script's arguments for env://", """
        import argparse, os, torch.distributed as dist
        p = argparse.ArgumentParser(); p.add_argument("--rank", type=int, default=0)
        args = p.parse_args()
        os.environ["RANK"] = str(args.rank)
        dist.init_process_group("gloo", init_method="env://")
        """, {("rank_from_args", 4)}),
    ("no destroy_process_group", """
        import torch.distributed as dist
        dist.init_process_group("gloo")
        """, {("no_destroy", 2)}),
]


@pytest.mark.parametrize("code,expected", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES])
def test_each_mistake_family_is_found_on_its_line(code, expected):
    assert expected <= found(code)


# The right patterns the issue names, and other correct spellings: no warning or error.
RIGHT = [
    ("paired 'rank 0 downloads first' barriers", """
        import os, torch, torch.distributed as dist
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        if local_rank not in [-1, 0]:
            dist.barrier()
        download()
        if local_rank == 0:
            dist.barrier()
        dist.destroy_process_group()
        """),
    ("rank 0 first with if/else barriers", """
        import torch.distributed as dist
        def fetch():
            if dist.get_rank() == 0:
                download()
                dist.barrier()
            else:
                dist.barrier()
        """),
    ("data split by rank without a sampler", """
        import os, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        model = DDP(net)
        train_loader = DataLoader(full[rank::world], batch_size=8, shuffle=True)
        dist.destroy_process_group()
        """),
    ("mp.spawn on one node with localhost", """
        import os, torch, torch.distributed as dist, torch.multiprocessing as mp
        from torch.nn.parallel import DistributedDataParallel as DDP
        def worker(rank, world_size):
            os.environ["MASTER_ADDR"] = "localhost"
            os.environ["MASTER_PORT"] = "12355"
            dist.init_process_group("nccl", rank=rank, world_size=world_size)
            torch.cuda.set_device(rank)
            model = DDP(net.to(rank), device_ids=[rank])
            dist.destroy_process_group()
        if __name__ == "__main__":
            n = torch.cuda.device_count()
            mp.spawn(worker, args=(n,), nprocs=n)
        """),
    ("--local_rank kept only to absorb the launcher's argument", """
        import argparse, os, torch, torch.distributed as dist
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=0)
        args = p.parse_args()
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        dist.destroy_process_group()
        """),
    ("rank-0 code that only uses model.module", """
        import os, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        def evaluate(net, loader):
            return [net(x) for x in loader]
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl")
        model = DDP(build().cuda(), device_ids=[int(os.environ["LOCAL_RANK"])])
        if dist.get_rank() == 0:
            evaluate(model.module, val_loader)
            torch.save(model.module.state_dict(), "m.pt")
        dist.destroy_process_group()
        """),
    ("sharded checkpoints every rank must save", """
        import os, torch, torch.distributed as dist
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        torch.save(optimizer.state_dict(), f"optim_rank{rank}.pt")
        path = os.path.join(out, f"shard_{dist.get_rank():05d}.pt")
        torch.save(shard, path)
        dist.destroy_process_group()
        """),
    ("save through a helper that checks the rank itself", """
        import torch, torch.distributed as dist
        def save_on_master(*args, **kwargs):
            if dist.get_rank() == 0:
                torch.save(*args, **kwargs)
        dist.init_process_group("gloo")
        save_on_master(model.state_dict(), "ckpt.pt")
        dist.destroy_process_group()
        """),
    ("Gloo DDP on CPUs needs no device", """
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(4, 4))
        dist.destroy_process_group()
        """),
    ("rank and world size from the environment", """
        import os, torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", rank=rank, world_size=world)
        model = DDP(net.cuda(), device_ids=[local_rank])
        dist.destroy_process_group()
        """),
    ("args.rank filled from RANK or SLURM_PROCID", """
        import os, torch, torch.distributed as dist
        def init_distributed_mode(args):
            if "RANK" in os.environ:
                args.rank = int(os.environ["RANK"])
                args.world_size = int(os.environ["WORLD_SIZE"])
            elif "SLURM_PROCID" in os.environ:
                args.rank = int(os.environ["SLURM_PROCID"])
            torch.cuda.set_device(args.gpu)
            dist.init_process_group("nccl", world_size=args.world_size, rank=args.rank)
        """),
    ("NCCL backend chosen by device", """
        import torch, torch.distributed as dist
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        t = torch.zeros(1)
        dist.all_reduce(t)
        dist.destroy_process_group()
        """),
    ("torch.save into memory", """
        import io, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        buf = io.BytesIO()
        torch.save(model.state_dict(), buf)
        dist.destroy_process_group()
        """),
    ("accelerate owns sampler, device and saving", """
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        acc = Accelerator()
        loader = DataLoader(ds, shuffle=True, batch_size=8)
        model, loader = acc.prepare(model, loader)
        if acc.is_main_process:
            acc.save(acc.unwrap_model(model).state_dict(), "m.pt")
        """),
    ("a save decorated to run on rank zero only", """
        import torch, torch.distributed as dist
        from lightning.pytorch.utilities import rank_zero_only
        @rank_zero_only
        def save(m):
            torch.save(m.state_dict(), "m.pt")
        dist.init_process_group("gloo")
        save(model)
        dist.destroy_process_group()
        """),
    ("callbacks.run() is not this file's run()", """
        import torch.distributed as dist
        def run():
            dist.barrier()
        if dist.get_rank() == 0:
            callbacks.run("on_train_end")
        """),
]


@pytest.mark.parametrize("code", [r[1] for r in RIGHT], ids=[r[0] for r in RIGHT])
def test_right_patterns_are_not_reported(code):
    assert kinds(code, noisy=False) == set()


SHELL = [
    ("deprecated launcher over continuation lines", """
        python -m torch.distributed.launch \\
          --nproc_per_node=4 --nnodes=1 \\
          train.py --epochs 3
        """, {("deprecated_launcher", 1)}),
    ("a script argument that fixes the rank", """
        torchrun --nproc_per_node=4 \\
          train.py --rank 0 --world-size 4
        """, {("rank_from_args", 2)}),
    ("the same --node_rank on every node", """
        # node 0
        torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 --master_addr=10.0.0.1 train.py
        # node 1
        torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 --master_addr=10.0.0.1 train.py
        """, {("rank_from_args", 4)}),
    ("--node_rank fixed for every node that srun starts", """
        srun torchrun --nnodes=4 --nproc_per_node=8 --node_rank=0 train.py
        """, {("rank_from_args", 1)}),
    ("loopback master with two nodes", """
        python -m torch.distributed.run --nnodes=2 --node_rank=$NODE_RANK \\
          --master_addr=127.0.0.1 --master_port=29500 train.py
        """, {("loopback_master", 2)}),
    ("accelerate launch on two machines with a loopback main process", """
        accelerate launch --num_machines 2 --machine_rank $RANK \\
          --main_process_ip 127.0.0.1 --main_process_port 29500 train.py
        """, {("loopback_master", 2)}),
    ("MASTER_ADDR=localhost exported for a multi-node launch", """
        export MASTER_ADDR=localhost
        torchrun --nnodes=2 --node_rank=$RANK train.py
        """, {("loopback_master", 1)}),
    ("NCCL names in export, prefix and mpirun -x", """
        export NCCL_SOCKET_TIMEOUT=3600
        NCCL_TIMEOUT=60 torchrun train.py
        mpirun -np 8 -x NCCL_SOCKETTIMEOUT -x NCCL_DEBUG python train.py
        """, {("fake_nccl_env", 1), ("fake_nccl_env", 2), ("fake_nccl_env", 3)}),
]


@pytest.mark.parametrize("code,expected", [s[1:] for s in SHELL], ids=[s[0] for s in SHELL])
def test_shell_launch_lines(code, expected):
    assert expected <= found(code, "run.sh")


SHELL_RIGHT = [
    ("two nodes numbered 0 and 1", """
        torchrun --nnodes=2 --nproc_per_node=8 --node_rank=0 --master_addr=10.0.0.1 train.py
        torchrun --nnodes=2 --nproc_per_node=8 --node_rank=1 --master_addr=10.0.0.1 train.py
        """),
    ("one node on localhost", """
        export MASTER_ADDR=localhost
        torchrun --nnodes=1 --nproc_per_node=4 --master_addr=127.0.0.1 train.py --epochs 3
        """),
    ("horovodrun and accelerate", """
        horovodrun -np 8 -H node0:4,node1:4 python train.py
        accelerate launch --num_processes 8 train.py --lr 0.1
        export NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=eth0
        """),
]


@pytest.mark.parametrize("code", [s[1] for s in SHELL_RIGHT], ids=[s[0] for s in SHELL_RIGHT])
def test_right_shell_lines_are_not_reported(code):
    assert kinds(code, "run.sh", noisy=False) == set()


def fixed(code: str, name: str = "train.py") -> str:
    text = textwrap.dedent(code).lstrip("\n")
    return apply(text, lint_text(name, text))


def test_diff_moves_launch_lines_to_torchrun_and_drops_use_env():
    new = fixed("""
        python3 -m torch.distributed.launch --use_env --nproc_per_node=2 \\
           train.py --epochs 1
        """, "run.sh")
    assert new.startswith("torchrun --nproc_per_node=2 \\\n")
    assert lint_text("run.sh", new) == []


def test_diff_reads_local_rank_from_the_environment_and_keeps_the_default():
    code = """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--local_rank", type=int, default=-1, help="gpu")
        args = p.parse_args()
        print(args.local_rank)
        """
    new = fixed(code)
    ast.parse(new)  # still Python
    assert "import os" in new and 'os.environ.get("LOCAL_RANK", -1)' in new
    assert "local_rank_arg" not in {f.kind for f in lint_text("train.py", new)}


def test_diff_adds_set_epoch_at_the_top_of_the_epoch_loop():
    new = fixed("""
        from torch.utils.data import DataLoader, DistributedSampler
        sampler = DistributedSampler(ds)
        loader = DataLoader(ds, sampler=sampler)
        for epoch in range(3):
            for x in loader:
                pass
        """)
    assert "for epoch in range(3):\n    sampler.set_epoch(epoch)\n    for x in loader:" in new
    assert "no_set_epoch" not in {f.kind for f in lint_text("train.py", new)}


def test_diff_takes_rank_and_world_size_from_the_launcher():
    new = fixed("""
        import os, torch
        import torch.distributed as dist
        dist.init_process_group("nccl", rank=int(os.environ["LOCAL_RANK"]),
                                world_size=torch.cuda.device_count())
        """)
    assert 'rank=int(os.environ["RANK"])' in new
    assert 'world_size=int(os.environ["WORLD_SIZE"])' in new
    assert "rank_from_args" not in {f.kind for f in lint_text("train.py", new)}


def test_no_diff_without_a_mechanical_fix():
    text = "import torch.distributed as dist\nif dist.get_rank() == 0:\n    dist.barrier()\n"
    assert unified("x.py", text, lint_text("x.py", text)) == ""


def test_every_kind_has_a_sourced_rule():
    table = rules()
    assert set(table) == set(KINDS)
    for rule in table.values():
        assert rule.why and rule.fix and rule.source and rule.severity in ("info", "warn", "error")
    assert table["no_destroy"].severity == "info"


def test_file_kind_by_extension_shebang_and_content():
    assert file_kind("a.py", "") == "python"
    assert file_kind("a.sh", "") == "shell"
    assert file_kind("job", "#!/bin/bash\ntorchrun x.py\n") == "shell"
    assert file_kind("job", "#!/usr/bin/env python3\nprint(1)\n") == "python"
    assert file_kind("job", "torchrun --nproc_per_node=2 x.py\n") == "shell"


def test_json_fields_are_stable():
    f = lint_text("x.py", "import torch.distributed as dist\ndist.init_process_group('gloo')\n")[0]
    assert set(f.to_dict()) == {"path", "line", "kind", "severity", "message", "why", "fix",
                                "source", "fixable", "same_as"}


def test_a_mistake_is_counted_once_and_repeated_as_notes_where_the_fix_may_go():
    code = """
        import argparse, torch.distributed as dist
        def main(rank, world_size):
            dist.init_process_group("nccl", init_method="tcp://10.0.0.1:23456",
                                    world_size=world_size, rank=rank)
        if __name__ == "__main__":
            p = argparse.ArgumentParser()
            p.add_argument("--rank", type=int, required=True)
            p.add_argument("--world-size", type=int, required=True)
            a = p.parse_args()
            main(a.rank, a.world_size)
        """
    fs = [f for f in lint_text("t.py", textwrap.dedent(code).lstrip("\n"))
          if f.kind == "rank_from_args"]
    primary = [(f.line, f.severity) for f in fs if not f.same_as]
    notes = {(f.line, f.same_as, f.severity) for f in fs if f.same_as}
    assert primary == [(10, "error")]
    assert {(4, 10, "info"), (7, 10, "info")} <= notes  # the init's rank=, the --rank option


def _corpus():
    return tomllib.loads((LINT / "corpus.toml").read_text(encoding="utf-8"))["case"]


def _lines(text: str, expect: list) -> list[tuple[str, int]]:
    out = []
    for kind, needle, *nth in expect:
        hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
        out.append((kind, hits[(nth[0] if nth else 1) - 1]))
    return out


@pytest.mark.parametrize("case", _corpus(), ids=lambda c: c["file"])
def test_corpus_labels_are_found_and_correct_scripts_stay_quiet(case):
    text = (LINT / "corpus" / case["file"]).read_text(encoding="utf-8")
    got = lint_text(case["file"], text)
    for kind, line in _lines(text, case["expect"]):
        assert any(f.kind == kind and abs(f.line - line) <= 2 for f in got), (kind, line, got)
    if case["confirmed"] == "correct":
        assert [f for f in got if f.severity != "info"] == []


def test_corpus_is_labelled_and_sourced():
    cases = _corpus()
    real = [c for c in cases if c["confirmed"] not in ("correct", "guide")]
    assert len(real) >= 35 and len([c for c in cases if c["confirmed"] == "correct"]) >= 10
    for c in cases:
        assert c["url"] and c["split"] in ("dev", "held")
        assert (LINT / "corpus" / c["file"]).is_file()
        assert {k for k, *_ in c["expect"]} <= set(KINDS)


def _severity(code: str, kind: str) -> set[str]:
    return {f.severity for f in lint_text("t.py", textwrap.dedent(code).lstrip("\n"))
            if f.kind == kind}


def test_desync_severity_follows_what_really_hangs():
    head = textwrap.dedent("""
        import torch, torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net.cuda(), device_ids=[0])
        """)
    barrier = head + "if dist.get_rank() == 0:\n    dist.barrier()\n"
    forward = head + "if dist.get_rank() == 0:\n    loss = model(x).sum()\n"
    quiet = head + "if dist.get_rank() == 0:\n    with torch.no_grad():\n        out = model(x)\n"
    assert _severity(barrier, "rank0_collective_desync") == {"error"}
    assert _severity(forward, "rank0_collective_desync") == {"warn"}
    assert _severity(quiet, "rank0_collective_desync") == {"info"}  # no sync under no_grad


def test_old_scripts_still_parse_with_line_numbers_kept():
    code = """
        import torch, torch.distributed as dist
        dist.init_process_group("nccl")
        print "epoch %d" % 1
        try:
            pass
        except ValueError, e:
            print e
        y = x.cuda(async=True)
        torch.save(m, "a.pt")
        """
    assert ("unguarded_save", 9) in found(code)

