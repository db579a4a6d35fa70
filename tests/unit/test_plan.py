"""The plan: exact per-node torchrun commands, env forwarding, masking, network choice."""

import shlex

import pytest

from ddpkit.errors import UsageError
from ddpkit.launch.envvars import forwarded_env, mask_args, parse_env_pair
from ddpkit.launch.hosts import Host
from ddpkit.launch.launcher import assign_np
from ddpkit.launch.plan import (
    BOOTSTRAP,
    TORCHRUN,
    Addr,
    LaunchOptions,
    NodeFacts,
    choose_network,
    make_plan,
)

OPTS = LaunchOptions(script="train.py", script_args=("--epochs", "3", "--max", "5"),
                     python="/venv/bin/python", workdir="/work", run_id="ddpkit-abc", port=29500)


def facts(ip_last, iface="eth0", extra=()):
    return NodeFacts(hostname=f"n{ip_last}", ssh_hostname=f"10.0.0.{ip_last}",
                     addrs=(Addr("lo", "127.0.0.1/8"), Addr(iface, f"10.0.0.{ip_last}/24"), *extra))


def three_nodes():
    hosts = [Host("node0", 2), Host("node1", 2), Host("node2", 2)]
    return make_plan(hosts, OPTS, {}, [facts(1), facts(2), facts(3)])


def test_multi_node_plan_commands():
    plan = three_nodes()
    assert plan.world_size == 6 and plan.master_addr == "10.0.0.1" and not plan.standalone
    n1 = plan.nodes[1]
    argv = list(n1.argv)
    # torchrun as ddpkit writes it on the node (nodeside/torchrun.py): torch.distributed.run
    assert argv[:2] == ["/venv/bin/python", TORCHRUN]
    pairs = {argv[i]: argv[i + 1] for i in range(2, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--nnodes"] == "3" and pairs["--nproc-per-node"] == "2"
    assert pairs["--node-rank"] == "1" and pairs["--rdzv-backend"] == "c10d"
    assert pairs["--rdzv-endpoint"] == "10.0.0.1:29500" and pairs["--rdzv-id"] == "ddpkit-abc"
    assert pairs["--local-addr"] == "10.0.0.2" and pairs["--max-restarts"] == "0"
    assert pairs["--rdzv-conf"] == "is_host=0"
    assert plan.nodes[0].argv[plan.nodes[0].argv.index("--rdzv-conf") + 1] == "is_host=1"
    # the script's own options stay the script's: "--" comes before it (and the bootstrap)
    assert argv[-7:] == ["--", BOOTSTRAP, "train.py", "--epochs", "3", "--max", "5"]
    assert n1.env["GLOO_SOCKET_IFNAME"] == "eth0" and n1.env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert n1.workdir == "/work"


def test_single_node_is_standalone():
    plan = make_plan([Host("localhost")], OPTS, {}, [NodeFacts(local=True)])
    assert plan.standalone and "--standalone" in plan.nodes[0].argv
    assert "--rdzv-endpoint" not in plan.nodes[0].argv


def test_user_ifname_is_kept():
    hosts = [Host("a"), Host("b")]
    plan = make_plan(hosts, OPTS, {"NCCL_SOCKET_IFNAME": "ib0"}, [facts(1), facts(2)])
    assert plan.nodes[0].env["NCCL_SOCKET_IFNAME"] == "ib0"
    assert plan.nodes[0].env["GLOO_SOCKET_IFNAME"] == "eth0"


def test_nproc_precedence():
    hosts = [Host("a", 4), Host("b")]
    plan = make_plan(hosts, OPTS, {}, [facts(1), facts(2)])
    assert [n.nproc for n in plan.nodes] == [4, 1]
    forced = make_plan(hosts, LaunchOptions(script="t.py", nproc_per_node=8), {}, [facts(1), facts(2)])
    assert [n.nproc for n in forced.nodes] == [8, 8]


def test_shell_command_is_paste_ready_and_masked():
    opts = LaunchOptions(script="train.py", script_args=("--hf-token", "hf_SECRET", "--lr=0.1"),
                         python="/venv/bin/python", workdir="/my work", run_id="r")
    env = {"WANDB_API_KEY": "abc123", "NCCL_DEBUG": "INFO", "HOME": "/root"}
    plan = make_plan([Host("a"), Host("b")], opts, env, [facts(1), facts(2)])
    cmd = plan.nodes[0].shell()
    assert "hf_SECRET" not in cmd and "abc123" not in cmd
    assert "--hf-token '****'" in cmd or "--hf-token ****" in cmd
    words = shlex.split(cmd)
    assert words[:3] == ["cd", "/my work", "&&"] and "NCCL_DEBUG=INFO" in words
    assert not any(w.startswith("HOME=") for w in words)  # nothing else leaks


@pytest.mark.parametrize("argv, expect", [
    (["--token", "x", "--lr", "1"], ["--token", "****", "--lr", "1"]),
    (["--api-key=abc"], ["--api-key=****"]),
    (["--password", "p"], ["--password", "****"]),
    (["--keyboard", "k"], ["--keyboard", "k"]),
    (["--key", "abc"], ["--key", "****"]),
    (["--encryption-key=zz"], ["--encryption-key=****"]),
    (["--no-auth", "--lr", "1"], ["--no-auth", "--lr", "1"]),
    (["--token", "--lr", "1"], ["--token", "--lr", "1"]),
])
def test_mask_args(argv, expect):
    assert mask_args(argv) == expect


def test_env_forwarding_prefixes_and_explicit():
    environ = {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "GLOO_SOCKET_IFNAME": "e",
               "OMP_NUM_THREADS": "4", "PYTHONPATH": "/src", "HOME": "/root", "SECRET": "s",
               "WANDB_PROJECT": "p", "PYTHONHOME": "/x"}
    env = forwarded_env(environ, ("WANDB_PROJECT", "FOO=bar"), (("LR", "0.1"),))
    assert env == {"NCCL_DEBUG": "INFO", "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
                   "GLOO_SOCKET_IFNAME": "e", "OMP_NUM_THREADS": "4", "PYTHONPATH": "/src",
                   "WANDB_PROJECT": "p", "FOO": "bar", "LR": "0.1"}


def test_forwarding_an_unset_variable_is_an_error():
    with pytest.raises(UsageError) as exc:
        forwarded_env({}, ("NOPE",))
    assert "NOPE is not set" in exc.value.message


@pytest.mark.parametrize("text", ["NOEQUALS", "1BAD=x", "=x"])
def test_bad_env_pair(text):
    with pytest.raises(UsageError):
        parse_env_pair(text)


def test_network_prefers_the_named_subnet_over_docker():
    docker = (Addr("docker0", "172.17.0.1/16"),)
    fs = [facts(1, extra=docker), facts(2, extra=docker)]
    master, ifaces, why = choose_network(fs)
    assert master == "10.0.0.1" and ifaces == ["eth0", "eth0"] and not why


def test_network_with_different_interface_names():
    fs = [facts(1, "ens5f0"), facts(2, "eth1")]
    master, ifaces, _ = choose_network(fs)
    assert master == "10.0.0.1" and ifaces == ["ens5f0", "eth1"]


def test_no_shared_subnet_falls_back_with_a_note():
    fs = [facts(1), NodeFacts(ssh_hostname="192.168.5.9", addrs=(Addr("eth0", "192.168.5.9/24"),))]
    plan = make_plan([Host("a"), Host("b")], OPTS, {}, fs)
    assert plan.master_addr == "10.0.0.1" and "share no IPv4 subnet" in plan.notes[0]
    assert "GLOO_SOCKET_IFNAME" not in plan.nodes[0].env


@pytest.mark.parametrize("kwargs, words", [
    ({"port": 0}, "--port"), ({"port": 70000}, "--port"),
    ({"nproc_per_node": 0}, "--nproc-per-node"), ({"max_restarts": -1}, "--max-restarts")])
def test_options_validation(kwargs, words):
    with pytest.raises(UsageError) as exc:
        LaunchOptions(script="t.py", **kwargs)
    assert words in exc.value.message


@pytest.mark.parametrize("hosts, np, expect", [
    ([Host("a", 4), Host("b", 4)], 8, [4, 4]),
    ([Host("a", 4), Host("b", 4)], 6, [4, 2]),
    ([Host("a", 4), Host("b", 4)], 4, [4]),
    ([Host("a"), Host("b")], 4, [2, 2]),
])
def test_assign_np(hosts, np, expect):
    assert [h.slots for h in assign_np(hosts, np)] == expect


@pytest.mark.parametrize("hosts, np", [([Host("a", 2)], 3), ([Host("a"), Host("b")], 3),
                                       ([Host("a")], 0)])
def test_assign_np_errors(hosts, np):
    with pytest.raises(UsageError):
        assign_np(hosts, np)


def test_probe_names_a_missing_module():
    from ddpkit.launch.probe import probe_here

    p = probe_here(Host("localhost"), "/", "", False, need=("no_such_module_xyz",))
    assert p.problem.kind == "module" and "no_such_module_xyz not installed" in p.problem.message
    assert "pip install no_such_module_xyz" in p.problem.fix


def test_accelerate_plan_per_node():
    opts = LaunchOptions(script="t.py", engine="accelerate", python="py", port=29501)
    plan = make_plan([Host("a", 2), Host("b", 2)], opts, {}, [facts(1), facts(2)])
    argv = list(plan.nodes[1].argv)
    # accelerate's own launcher, its in-process torchrun agent with ddpkit's tee (nodeside/torchrun.py)
    assert argv[:4] == ["py", TORCHRUN, "-m", "accelerate.commands.launch"]
    pairs = {argv[i]: argv[i + 1] for i in range(4, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--num_machines"] == "2" and pairs["--machine_rank"] == "1"
    assert pairs["--num_processes"] == "4" and pairs["--main_process_ip"] == "10.0.0.1"
    assert pairs["--main_process_port"] == "29501" and "--multi_gpu" in argv
    with pytest.raises(UsageError):
        make_plan([Host("a", 2), Host("b", 1)], opts, {}, [facts(1), facts(2)])


def test_horovodrun_plan_is_one_local_command():
    opts = LaunchOptions(script="t.py", engine="horovod", python="py")
    plan = make_plan([Host("a", 2), Host("b", 2)], opts, {}, [facts(1), facts(2)])
    (node,) = plan.nodes
    argv = list(node.argv)
    assert node.local and argv[:3] == ["py", "-m", "horovod.runner.launch"]
    assert argv[argv.index("-np") + 1] == "4" and argv[argv.index("-H") + 1] == "a:2,b:2"
    assert "--gloo" in argv and argv[-2:] == ["py", "t.py"]


def test_restarts_get_their_own_worker_store_on_one_node_and_several():
    opts = LaunchOptions(script="t.py", max_restarts=1)
    plan = make_plan([Host("a"), Host("b")], opts, {}, [facts(1), facts(2)])
    assert plan.nodes[0].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    single = make_plan([Host("a")], opts, {}, [NodeFacts(local=True)])
    assert single.nodes[0].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"  # else it hangs
    once = make_plan([Host("a")], LaunchOptions(script="t.py"), {}, [NodeFacts(local=True)])
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in once.nodes[0].env


@pytest.mark.parametrize("name, masked", [("WANDB_API_KEY", True), ("SSH_KEY", True),
                                          ("HF_TOKEN", True), ("AUTH_HEADER", True),
                                          ("KEYBOARD_LAYOUT", False), ("NCCL_DEBUG", False),
                                          ("MONKEY", False)])
def test_mask_value(name, masked):
    from ddpkit.launch.envvars import mask_value

    assert (mask_value(name, "v") == "****") == masked
