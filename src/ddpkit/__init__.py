"""ddpkit: prepare, verify, launch and troubleshoot distributed PyTorch training.

The training runtime (`ddpkit.init`, `ddpkit.wrap`, ...) is re-exported here lazily: importing
ddpkit for its command line never imports torch.
"""

__version__ = "0.1.0"

_RUNTIME = ("Context", "init", "shutdown", "seed_everything", "loader", "DistributedLoader",
            "scale_lr", "global_batch_size", "wrap", "save_checkpoint", "load_checkpoint",
            "print0", "is_main", "step")


def __getattr__(name):
    if name in _RUNTIME:
        from ddpkit import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'ddpkit' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_RUNTIME))
