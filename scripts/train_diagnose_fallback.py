"""Train the statistical fallback of `ddpkit diagnose` from the corpus's "train" split only, and
write src/ddpkit/data/diagnose_fallback.json (deterministic: the same corpus gives the same file).

    python scripts/train_diagnose_fallback.py          # write the model
    python scripts/train_diagnose_fallback.py --check  # exit 1 if the file is stale
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

from ddpkit.troubleshoot.diagnose import fallback  # noqa: E402
from ddpkit.troubleshoot.diagnose.kb import CATEGORIES  # noqa: E402
from tests.diagnose_corpus import DIAG, SPLITS, LogCase, body, header  # noqa: E402

OUT = ROOT / "src" / "ddpkit" / "data" / fallback.MODEL


def train_cases() -> list[LogCase]:
    """The train split's failure logs, read from the train folders only (the held-out folders
    are never opened here)."""
    cases = []
    for folder in sorted(f for f, split in SPLITS.items() if split == "train"):
        for path in sorted((DIAG / folder).glob("*.log")):
            text = path.read_text(encoding="utf-8", errors="replace")
            category = header(text, "category")
            if category in CATEGORIES and "success" not in path.name:
                cases.append(LogCase(path, "train", category, header(text, "source")
                                     or header(text, "made"), body(text)))
    return cases


def train_docs(cases=None) -> list[tuple[str, str, frozenset[str]]]:
    """(repository, category, features) of every train log."""
    cases = train_cases() if cases is None else cases
    return [(c.repo, c.category, frozenset(fallback.log_features(c.text.splitlines())))
            for c in cases if c.split == "train" and c.category in CATEGORIES]


def build() -> str:
    return fallback.dumps(fallback.train(train_docs()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    text = build()
    if args.check:
        fresh = OUT.exists() and OUT.read_text(encoding="utf-8") == text
        print(f"{OUT.relative_to(ROOT)}: {'fresh' if fresh else 'stale: rerun ' + __file__}")
        return 0 if fresh else 1
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)} ({len(text) // 1024} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
