"""busbw-vs-size curve of a collective (nccl-tests style)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


PNG_SOFTWARE = "HeteroSim collective"
"""The PNG's ``Software`` text chunk: ``--png`` replaces only a curve that carries it (``is_our_png``)."""


def is_our_png(head: bytes) -> bool:
    """Whether the first bytes of a file are a PNG this module wrote (signature, then our text chunk,
    which matplotlib writes before the image data)."""
    return head.startswith(b"\x89PNG\r\n\x1a\n") and b"Software\x00" + PNG_SOFTWARE.encode() in head


def plot_busbw(path, rows: list[dict], title: str = "") -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["size_bytes"] for r in rows], [r["busbw_GBps"] for r in rows], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png", metadata={"Software": PNG_SOFTWARE})
    plt.close(fig)
