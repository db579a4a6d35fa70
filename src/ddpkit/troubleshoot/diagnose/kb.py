"""The knowledge base: load signatures.toml once and check every entry."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from ddpkit.data import tomllib

CATEGORIES = (
    "rendezvous_master_unreachable", "port_in_use_or_firewall", "nccl_interface_selection",
    "nccl_timeout_or_desync", "version_mismatch", "duplicate_gpu_or_wrong_device",
    "shared_memory_docker", "ssh_failure", "oom_cuda_error", "ddp_usage_error",
    "launcher_misuse", "horovod_specific", "p2p_acs_iommu",
)


@dataclass(frozen=True)
class Signature:
    id: str
    category: str
    title: str
    kind: str  # cause | symptom
    weight: float
    patterns: tuple[re.Pattern, ...]
    requires: tuple[re.Pattern, ...]
    excludes: tuple[re.Pattern, ...]
    evidence: tuple[re.Pattern, ...]
    explanation: str
    fix: str
    source: str


class KnowledgeBaseError(ValueError):
    pass


def parse(data: dict) -> tuple[Signature, ...]:
    out, seen = [], set()
    for raw in data.get("signature", []):
        sid = raw.get("id", "?")
        if sid in seen:
            raise KnowledgeBaseError(f"duplicate signature id {sid}")
        seen.add(sid)
        if raw.get("category") not in CATEGORIES:
            raise KnowledgeBaseError(f"{sid}: unknown category {raw.get('category')}")
        if raw.get("kind") not in ("cause", "symptom"):
            raise KnowledgeBaseError(f"{sid}: kind must be cause or symptom")
        for key in ("title", "explanation", "fix", "source", "patterns"):
            if not raw.get(key):
                raise KnowledgeBaseError(f"{sid}: missing {key}")
        try:
            compiled = {k: tuple(re.compile(p) for p in raw.get(k, []))
                        for k in ("patterns", "requires", "excludes", "evidence")}
        except re.error as exc:
            raise KnowledgeBaseError(f"{sid}: bad regex: {exc}") from None
        out.append(Signature(id=sid, category=raw["category"], title=raw["title"],
                             kind=raw["kind"], weight=float(raw.get("weight", 0.5)),
                             explanation=raw["explanation"], fix=raw["fix"],
                             source=raw["source"], **compiled))
    return tuple(out)


@functools.lru_cache(maxsize=None)
def signatures() -> tuple[Signature, ...]:
    text = resources.files(__package__).joinpath("signatures.toml").read_text(encoding="utf-8")
    return parse(tomllib.loads(text))
