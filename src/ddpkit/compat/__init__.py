"""APIs of other tools, implemented over torch.distributed (see horovod_torch.py)."""

from importlib import resources


def shim_files() -> dict[str, str]:
    """The files that make `import horovod.torch` resolve to ddpkit's implementation; written
    on every node by the launch guard, then put first on PYTHONPATH."""
    source = resources.files(__name__).joinpath("horovod_torch.py").read_text(encoding="utf-8")
    return {"hvdshim/horovod/__init__.py": '"""ddpkit\'s Horovod-compatible shim (no real '
                                           'Horovod is installed here)."""\n',
            "hvdshim/horovod/torch/__init__.py": source}
