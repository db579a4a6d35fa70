"""APIs of other tools, implemented over torch.distributed (see horovod_torch/)."""

from importlib import resources


def shim_files() -> dict[str, str]:
    """The files that make `import horovod.torch` resolve to ddpkit's implementation (every
    module of horovod_torch/, which import each other relatively); written on every node by
    the launch guard, then put first on PYTHONPATH."""
    folder = resources.files(__name__).joinpath("horovod_torch")
    files = {"hvdshim/horovod/__init__.py": '"""ddpkit\'s Horovod-compatible shim (no real '
                                            'Horovod is installed here)."""\n'}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".py"):
            files[f"hvdshim/horovod/torch/{entry.name}"] = entry.read_text(encoding="utf-8")
    return files
