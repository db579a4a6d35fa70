"""busbw against size, one line per collective (matplotlib, an optional extra)."""

from __future__ import annotations


def plot(rows: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for op in dict.fromkeys(r["op"] for r in rows):
        mine = [r for r in rows if r["op"] == op and r["size"] > 0]
        ax.plot([r["size"] for r in mine], [r["oop"]["busbw"] for r in mine], marker="o",
                label=f"{op} (out-of-place)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("ddpkit bench")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
