"""`ddpkit diagnose`: failure signatures as data (signatures.toml) and the matcher that reads
interleaved multi-rank logs and names the earliest root cause with its fix."""

from ddpkit.troubleshoot.diagnose.matcher import Finding, diagnose, diagnose_text

__all__ = ["Finding", "diagnose", "diagnose_text"]
