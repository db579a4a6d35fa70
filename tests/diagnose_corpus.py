"""Record real failure logs on this machine for `ddpkit diagnose`'s test corpus.

Every scenario causes the failure for real (real torchrun, Gloo, sshd in namespaces) and saves
what the user would see to tests/fixtures/diagnose/local/<name>.log, with a header naming the
expected root-cause category, the evidence it must carry and the command that made it.

    python -m tests.diagnose_corpus [NAME ...]      # (re)record all or some scenarios; root
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "diagnose" / "local"
FAIL = ROOT / "tests" / "scripts" / "failures"
SCRIPTS = ROOT / "tests" / "scripts"
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run"]


@dataclass
class Scenario:
    name: str
    category: str  # "none" for a successful run: no finding expected
    expect: dict = field(default_factory=dict)  # evidence key -> value that must be found
    needs_cluster: bool = False
    run: Callable[..., tuple[str, str]] | None = None  # -> (log text, command shown)


def sh(argv: list[str], env: dict | None = None, timeout: float = 180, cwd: str | None = None) -> str:
    full = dict(os.environ)
    full.update(env or {})
    done = subprocess.run(argv, capture_output=True, text=True, env=full, timeout=timeout,
                          cwd=cwd or "/tmp")
    return done.stdout + done.stderr


def show(argv: list[str], env: dict | None = None) -> str:
    pre = " ".join(f"{k}={v}" for k, v in (env or {}).items())
    cmd = " ".join(a.replace(str(ROOT) + "/", "") for a in argv).replace(PY, "python")
    return f"{pre} {cmd}".strip()


def torchrun(script: Path, nproc: int = 2, env: dict | None = None, extra: list[str] = ()) -> tuple[str, str]:
    argv = [*TORCHRUN, "--standalone", "--nproc-per-node", str(nproc), *extra, str(script)]
    return sh(argv, env), show(argv, env)


def plain(script: Path, env: dict | None = None) -> tuple[str, str]:
    argv = [PY, str(script)]
    return sh(argv, env), show(argv, env)


def port_in_use(_vc=None) -> tuple[str, str]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 29511))
    s.listen(1)
    try:
        argv = [*TORCHRUN, "--nnodes", "1", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
                "--master-port", "29511", str(SCRIPTS / "train_ddp.py")]
        return sh(argv), "(another job holds port 29511) " + show(argv)
    finally:
        s.close()


def master_not_listening(vc) -> tuple[str, str]:
    env = {"MASTER_ADDR": vc.nodes[0].ip, "MASTER_PORT": "29500", "RANK": "1", "WORLD_SIZE": "2"}
    argv = ["env", *[f"{k}={v}" for k, v in env.items()], PY, str(FAIL / "init_with_timeout.py")]
    out = vc.nodes[1].run(argv, timeout=120)
    return out.stdout + out.stderr, f"(on node1, nothing started on node0) {show(argv)}"


def hostname_loopback(vc) -> tuple[str, str]:
    saved = {n.name: n.hosts_file.read_text() for n in vc.nodes}
    for n in vc.nodes:
        others = "".join(f"{m.ip} {m.name}\n" for m in vc.nodes if m is not n)
        n.write_hosts(f"127.0.0.1 localhost\n127.0.1.1 {n.name}\n{others}")
    try:
        hosts = ",".join(n.ip for n in vc.nodes[:2])
        argv = [PY, "-m", "ddpkit", "launch", "--no-preflight", "--ssh-config", str(vc.ssh_config),
                "-H", hosts, str(SCRIPTS / "train_ddp.py")]
        return sh(argv, timeout=300), ("(every node maps its own hostname to 127.0.1.1) "
                                       + show(argv).replace(str(vc.ssh_config), "CFG"))
    finally:
        for n in vc.nodes:
            n.write_hosts(saved[n.name])


def ssh_key_missing(vc) -> tuple[str, str]:
    node = vc.nodes[1]
    keys = node.authorized_keys.read_text()
    node.authorized_keys.write_text("")
    try:
        argv = [PY, "-m", "ddpkit", "launch", "--ssh-config", str(vc.ssh_config), "-H",
                "node0,node1", str(SCRIPTS / "train_ddp.py")]
        return sh(argv), "(node1's authorized_keys lacks the key) " + show(argv).replace(
            str(vc.ssh_config), "CFG")
    finally:
        node.authorized_keys.write_text(keys)


def small_shm(_vc=None) -> tuple[str, str]:
    inner = f"mount -t tmpfs -o size=1m tmpfs /dev/shm && exec {PY} {FAIL / 'shm_dataloader.py'}"
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner]
    return sh(argv), "(/dev/shm is a 1 MiB tmpfs, as in a container) " + show([PY, str(FAIL / "shm_dataloader.py")])


def launch_success(vc) -> tuple[str, str]:
    argv = [PY, "-m", "ddpkit", "launch", "--ssh-config", str(vc.ssh_config), "-H",
            vc.hosts_spec(1), str(SCRIPTS / "train_ddp.py")]
    return sh(argv, env={"TORCH_CPP_LOG_LEVEL": "INFO"}), \
        show(argv).replace(str(vc.ssh_config), "CFG")


def ddpkit_launch(script: Path, *extra: str) -> tuple[str, str]:
    argv = [PY, "-m", "ddpkit", "launch", "--nproc-per-node", "2", *extra, str(script)]
    out = sh(argv, env={"NO_COLOR": "1", "COLUMNS": "100"})
    # What the user saw, less ddpkit's own diagnosis (the answer must not be in the question).
    return out.split("\ndiagnosis: ")[0] + "\n", show(argv)


SCENARIOS = [
    # A bug of the script itself: named as such, never as a distributed cause (issue 12).
    Scenario("script-keyerror-rank1", "script_error",
             {"exception": "KeyError", "where": "localhost:1", "at": "keyerror_rank1.py:10"},
             run=lambda _vc=None: ddpkit_launch(FAIL / "keyerror_rank1.py")),
    Scenario("script-boom-rank1-restarts", "script_error",
             {"exception": "RuntimeError", "where": "localhost:1"},
             run=lambda _vc=None: ddpkit_launch(FAIL / "boom_rank1.py", "--max-restarts", "1")),
    Scenario("script-module-not-found", "script_error", {"exception": "ModuleNotFoundError"},
             run=lambda _vc=None: ddpkit_launch(FAIL / "missing_module.py")),
    Scenario("script-shell-as-python", "script_error", {"exception": "SyntaxError"},
             run=lambda _vc=None: ddpkit_launch(FAIL / "train_wrapper.sh")),
    Scenario("port-in-use", "port_in_use_or_firewall", {"port": "29511"}, run=port_in_use),
    Scenario("master-not-listening", "rendezvous_master_unreachable", {"port": "29500"},
             needs_cluster=True, run=master_not_listening),
    Scenario("hostname-loopback", "nccl_interface_selection", {}, needs_cluster=True,
             run=hostname_loopback),
    Scenario("skip-collective", "nccl_timeout_or_desync", {},
             run=lambda _vc=None: torchrun(FAIL / "skip_collective.py")),
    Scenario("skip-collective-debug", "nccl_timeout_or_desync", {},
             run=lambda _vc=None: torchrun(FAIL / "skip_collective.py",
                                           env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL"})),
    Scenario("ddp-unused-parameters", "ddp_usage_error", {},
             run=lambda _vc=None: torchrun(FAIL / "unused_params.py")),
    Scenario("pg-not-initialized", "ddp_usage_error", {},
             run=lambda _vc=None: plain(FAIL / "pg_not_initialized.py")),
    Scenario("local-rank-required-under-torchrun", "launcher_misuse", {},
             run=lambda _vc=None: torchrun(FAIL / "local_rank_arg.py", nproc=1)),
    Scenario("local-rank-dash-from-launch", "launcher_misuse", {},
             run=lambda _vc=None: (sh([PY, "-m", "torch.distributed.launch", "--nproc-per-node",
                                       "1", str(FAIL / "local_rank_arg.py")]),
                                   "python -m torch.distributed.launch --nproc-per-node 1 "
                                   "tests/scripts/failures/local_rank_arg.py")),
    Scenario("no-launcher", "launcher_misuse", {},
             run=lambda _vc=None: plain(FAIL / "no_launcher.py")),
    Scenario("gloo-iface-missing", "nccl_interface_selection", {"iface": "nosuch0"},
             run=lambda _vc=None: torchrun(SCRIPTS / "train_ddp.py",
                                           env={"GLOO_SOCKET_IFNAME": "nosuch0"})),
    Scenario("small-dev-shm", "shared_memory_docker", {}, run=small_shm),
    Scenario("ssh-key-missing", "ssh_failure", {}, needs_cluster=True, run=ssh_key_missing),
    Scenario("success-torchrun-debug", "none", {},
             run=lambda _vc=None: torchrun(SCRIPTS / "train_ddp.py",
                                           env={"TORCH_CPP_LOG_LEVEL": "INFO",
                                                "NCCL_DEBUG": "INFO"})),
    Scenario("success-ddpkit-launch", "none", {}, needs_cluster=True, run=launch_success),
    # Healthy runs with the noise real runs print: none of them may yield a finding.
    Scenario("success-noisy-torchrun", "none", {},
             run=lambda _vc=None: torchrun(FAIL / "noisy_success.py")),
    Scenario("success-noisy-debug-detail", "none", {},
             run=lambda _vc=None: torchrun(FAIL / "noisy_success.py",
                                           env={"TORCH_DISTRIBUTED_DEBUG": "DETAIL",
                                                "TORCH_CPP_LOG_LEVEL": "INFO"})),
    Scenario("success-noisy-ddpkit-launch", "none", {},
             run=lambda _vc=None: ddpkit_launch(FAIL / "noisy_success.py")),
    Scenario("success-launch-deprecated-use-env", "none", {},
             run=lambda _vc=None: (sh([PY, "-m", "torch.distributed.launch", "--use-env",
                                       "--nproc-per-node", "2", str(FAIL / "noisy_success.py")]),
                                   "python -m torch.distributed.launch --use-env "
                                   "--nproc-per-node 2 tests/scripts/failures/noisy_success.py")),
    Scenario("success-torchrun-restarts-allowed", "none", {},
             run=lambda _vc=None: torchrun(FAIL / "noisy_success.py",
                                           extra=["--max-restarts", "2"])),
    Scenario("success-ddpkit-demo", "none", {},
             run=lambda _vc=None: (sh([PY, "-m", "ddpkit", "demo", "--nproc-per-node", "2"],
                                      env={"NO_COLOR": "1"}), "ddpkit demo --nproc-per-node 2")),
]


# ---- the corpus of real logs, for tests/unit/test_diagnose.py and benchmarks/diagnose_eval.py
DIAG = ROOT / "tests" / "fixtures" / "diagnose"
# "relabelled": a label changed after its batch was measured, to follow a labelling rule that
# other threads of the same cause already followed (it says what the label was, when and why)
HEADER_KEYS = ("source", "category", "note", "made", "expect", "hung", "relabelled")
# Which folder plays which part (frozen): the signatures were written from "train"; "heldout"
# was gathered after the first knowledge base (its misses were then looked at); "unseen" was
# gathered from other repositories after the rules of issue 12 were written and measured once
# before any rule was changed (then four general fixes); "unseen2" is a second such batch,
# measured before any further change; "unseen3", "unseen4" and "unseen5" likewise (unseen4, unseen5: split from one
# gathered batch each, by sha1 of the repository, 3 of 5 buckets; the other 2 went to public/, i.e.
# train); "healthy" logs must yield no finding.
SPLITS = {"public": "train", "local": "train", "heldout": "heldout", "success": "healthy",
          "healthy": "healthy", "healthy2": "healthy", "healthy3": "healthy",
          "healthy4": "healthy", "healthy5": "healthy",
          "healthy6": "healthy", "healthy7": "healthy",
          "healthy8": "healthy", "healthy9": "healthy", "healthy10": "healthy",
          "healthy11": "healthy", "healthy12": "healthy", "healthy13": "healthy",
          "healthy14": "healthy", "healthy15": "healthy",
          "healthy16": "healthy", "healthy17": "healthy", "healthy18": "healthy",
          "healthy19": "healthy", "healthy20": "healthy", "healthy21": "healthy", "healthy22": "healthy",
          "healthy23": "healthy", "healthy24": "healthy", "healthy25": "healthy",
          "healthy26": "healthy", "healthy27": "healthy", "healthy28": "healthy"}  # and every unseen* folder is a split
# of its own name; healthy2 (gathered by two helpers after the message catalogue's rules were
# written, frozen, first look measured once) joins the healthy pool, as does healthy3 (gathered
# with unseen11/unseen12 after the hang ranking was written)


@dataclass(frozen=True)
class LogCase:
    path: Path
    split: str
    category: str  # "none" for a healthy log
    source: str
    text: str  # the log itself, without the header lines
    # "# hung: yes": the thread says the run hung (its note says hang, stall, freeze, stuck or
    # deadlock; set by that rule alone, whatever the category): what the user knew and would
    # tell `ddpkit diagnose --hung`
    hung: bool = False

    @property
    def repo(self) -> str:
        parts = self.source.split("github.com/")
        return "/".join(parts[1].split("/")[:2]).lower() if len(parts) > 1 else self.source


def header(text: str, key: str) -> str:
    for line in text.splitlines()[:8]:
        if line.startswith(f"# {key}: "):
            return line[len(key) + 4:].strip()
    return ""


def body(text: str) -> str:
    return "\n".join(ln for ln in text.splitlines()
                     if not any(ln.startswith(f"# {k}: ") for k in HEADER_KEYS))


def load_folder(directory: Path, split: str) -> list[LogCase]:
    """The logs of one folder, each with the category, source and hang its header gives."""
    cases = []
    for path in sorted(directory.glob("*.log")):
        text = path.read_text(encoding="utf-8", errors="replace")
        category = header(text, "category") or "none"
        if "success" in path.name or split == "healthy":
            category = "none"
        cases.append(LogCase(path, "healthy" if category == "none" else split, category,
                             header(text, "source") or header(text, "made"), body(text),
                             header(text, "hung") == "yes"))
    return cases


def load_corpus() -> list[LogCase]:
    folders = dict(SPLITS, **{d.name: d.name for d in sorted(DIAG.glob("unseen*"))})
    return [case for folder, split in folders.items() for case in load_folder(DIAG / folder, split)]


# The message catalogue (tests/fixtures/diagnose/messages/*.toml): the failure messages of
# torch, NCCL, Gloo, Open MPI, Horovod, accelerate and DeepSpeed, in each wording they had across
# versions, taken from those projects' sources (each with the file and version it comes from),
# rendered as a user sees them. Breadth, not frequency: a log that names a cause in words some
# other release printed must still be read.
MESSAGES = DIAG / "messages"


@dataclass(frozen=True)
class Message:
    project: str
    url: str
    versions: str
    line: str
    category: str
    kind: str  # "cause" or "symptom"; "fact": also printed by healthy runs, not scored alone
    also: str = ""  # a second category an expert could equally name from this line alone

    def right(self, category: str | None) -> bool:
        return category in (self.category, self.also or self.category)


def load_messages() -> list[Message]:
    import tomllib

    out = []
    for path in sorted(MESSAGES.glob("*.toml")):
        for m in tomllib.loads(path.read_text(encoding="utf-8"))["message"]:
            out.append(Message(m["project"], m["url"], m.get("versions", ""), m["line"].strip(),
                               m["category"], m.get("kind", "cause"), m.get("also", "")))
    return out


def record(names: list[str]) -> None:
    from tests.vcluster import VCluster

    OUT.mkdir(parents=True, exist_ok=True)
    chosen = [s for s in SCENARIOS if not names or s.name in names]
    vc = VCluster(3).up() if any(s.needs_cluster for s in chosen) else None
    try:
        for s in chosen:
            text, command = s.run(vc)
            expect = " ".join(f"{k}={v}" for k, v in s.expect.items())
            header = (f"# made: {command}\n# category: {s.category}\n"
                      + (f"# expect: {expect}\n" if expect else ""))
            (OUT / f"{s.name}.log").write_text(header + text)
            print(f"recorded {s.name}: {len(text.splitlines())} lines")
    finally:
        if vc:
            vc.down()


if __name__ == "__main__":
    record(sys.argv[1:])
