"""ddpkit: prepare, verify, launch and troubleshoot distributed PyTorch training."""

__version__ = "0.1.0"
