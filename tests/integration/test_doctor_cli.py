"""The doctor for real on this machine: the CLI a user runs, its JSON, its exit codes."""

import json
import os
import stat
import subprocess
import sys

from tests.conftest import FIXTURES, PYTHON, ddpkit


def doctor_json(env=None, *extra):
    done = ddpkit("doctor", "--json", *extra, env=env)
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    return done, report, {c["id"]: c for c in report["checks"]}


def test_help_does_not_import_torch():
    code = ("import sys; from ddpkit.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch imported by --help'\n"
            "main(['doctor', '--help']) if False else None\n")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "doctor" in done.stdout and "launch" in done.stdout


def test_doctor_json_does_not_import_torch():
    code = ("import sys, io, contextlib; from ddpkit.cli.main import main\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n    main(['doctor', '--json'])\n"
            "print('torch' in sys.modules)")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "False"


def test_doctor_json_schema_and_exit_code():
    done, report, checks = doctor_json()
    assert report["schema"] == 1 and report["host"]
    for c in report["checks"]:
        assert set(c) == {"id", "status", "summary", "detail", "hint"}
        assert c["status"] in ("ok", "warn", "fail", "skip")
        if c["status"] in ("fail", "warn"):
            assert c["hint"], f"{c['id']} has no hint"
    failed = any(c["status"] == "fail" for c in report["checks"])
    assert done.returncode == (1 if failed else 0)
    facts = report["facts"]
    assert facts["torch"]["version"].startswith("2.")
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    for area in ("python", "os", "torch", "gpu", "net", "port", "env", "sys", "ssh"):
        assert any(c.startswith(area + ".") for c in checks), area


def test_cpu_machine_is_a_valid_setup():
    _, _, checks = doctor_json({"PATH": "/usr/bin:/bin"})
    assert checks["gpu.driver"]["status"] == "ok"
    assert "Gloo" in checks["gpu.driver"]["summary"]


def test_nccl_socket_timeout_warns_and_names_the_real_knob():
    _, _, checks = doctor_json({"NCCL_SOCKET_TIMEOUT": "3600"})
    c = checks["env.NCCL_SOCKET_TIMEOUT"]
    assert c["status"] == "warn"
    assert "init_process_group(timeout=" in c["detail"] + c["hint"]


def test_ifname_that_does_not_exist_fails():
    done, _, checks = doctor_json({"GLOO_SOCKET_IFNAME": "nosuch0"})
    assert checks["env.GLOO_SOCKET_IFNAME"]["status"] == "fail"
    assert done.returncode == 1


def _fake_smi(tmp_path, fixture):
    """Only the GPU is faked: a recorded `nvidia-smi -q` from a real machine."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    tool.write_text(f"#!/bin/sh\ncat {FIXTURES / 'gpu' / fixture}\n")
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def test_gpu_machine_with_cpu_torch_fails_with_the_right_wheel(tmp_path):
    done, report, checks = doctor_json(_fake_smi(tmp_path, "smi-q-535.129.03.txt"))
    assert report["facts"]["gpu_count"] == 8
    assert report["facts"]["driver"] == "535.129.03"
    assert "8 x NVIDIA A100-SXM4-40GB" in checks["gpu.driver"]["summary"]
    torch_cuda = checks["gpu.torch_cuda"]
    assert torch_cuda["status"] == "fail" and "CPU build" in torch_cuda["summary"]
    assert "whl/cu121" in torch_cuda["hint"]  # the driver reports CUDA 12.2
    assert done.returncode == 1


def test_cuda_visible_devices_beyond_the_gpus_fails(tmp_path):
    env = _fake_smi(tmp_path, "smi-q-560.35.03.txt")
    env["CUDA_VISIBLE_DEVICES"] = "0,1"
    _, _, checks = doctor_json(env)
    assert checks["gpu.visible"]["status"] == "fail"
    assert "'1'" in checks["gpu.visible"]["summary"]


def test_human_output_shows_problems_first_with_fix():
    done = ddpkit("doctor", env={"NCCL_SOCKET_TIMEOUT": "3600", "COLUMNS": "200"})
    out = done.stdout
    assert "NCCL_SOCKET_TIMEOUT" in out and "fix:" in out
    assert out.index("env.NCCL_SOCKET_TIMEOUT") < out.index("python.version")


def test_bad_flag_is_one_line_and_exit_2():
    done = ddpkit("doctor", "--frobnicate")
    assert done.returncode == 2
    assert "unrecognized arguments: --frobnicate" in done.stderr
    assert "Traceback" not in done.stderr
    bad_port = ddpkit("doctor", "--port", "70000")
    assert bad_port.returncode == 2 and "70000" in bad_port.stderr


def test_unknown_command_exit_2():
    done = ddpkit("frobnicate")
    assert done.returncode == 2 and "unknown command 'frobnicate'" in done.stderr
