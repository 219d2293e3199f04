"""Traffic-study plots: FCT slowdown vs flow size (HPCC-style bins) and queue-depth CDF, one line per CC."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_slowdown_vs_size(path: Path, results: list[dict[str, Any]]) -> None:
    """p50 (dashed) and p95 (solid) slowdown per 5 %-of-flows size bin, x = the bin's largest flow."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for i, r in enumerate(results):
        bins = r["summary"]["slowdown"]["by_size_quantile"]
        if not bins:
            continue
        x = [b["size_hi_bytes"] for b in bins]
        ax.plot(x, [b["p95"] for b in bins], color=f"C{i}", marker="o", ms=3, label=f"{r['cc']} p95")
        ax.plot(x, [b["p50"] for b in bins], color=f"C{i}", ls="--", lw=0.9, label=f"{r['cc']} p50")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("flow size (bytes, largest flow of each 5 % bin)")
    ax.set_ylabel("FCT slowdown")
    ax.set_title(results[0]["summary"]["scenario"], fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_queue_cdf(path: Path, results: list[dict[str, Any]]) -> None:
    """CDF of sampled egress queue depth (hottest ports, after the warm-up); empty note if not measured."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for i, r in enumerate(results):
        q = r.get("_queue_cdf") or []
        if q:
            ax.plot([v / 1e3 for v in q], [k / len(q) for k in range(1, len(q) + 1)], color=f"C{i}", label=r["cc"])
            drawn = True
    if drawn:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "no queue samples (backend does not model queues)", ha="center", transform=ax.transAxes)
    ax.set_xlabel("egress queue (KB), sampled on the hottest ports")
    ax.set_ylabel("CDF")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
