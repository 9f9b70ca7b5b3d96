"""``--plot``: the ratios against their targets in a PNG (needs matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence

import ctxlock
from ctxlock._bench.report import ratio_text
from ctxlock._bench.result import RowResult

__all__ = ["plot"]


def plot(results: Sequence[RowResult], path: str) -> None:
    """Bars of each measured ratio (log scale) with its target marked; green if met."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [r for r in results if r.ratio is not None]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(measured) + 2.0), 5.0))
    floor = 1e-3  # a zero (no RSS growth) still needs a bar on a log axis
    positions = range(len(measured))
    heights = [max(r.ratio or 0.0, floor) for r in measured]
    colors = ["tab:green" if r.ok else "tab:red" for r in measured]
    ax.bar(positions, heights, color=colors, width=0.6)
    ax.scatter(
        positions,
        [r.target for r in measured],
        marker="_",
        s=900,
        linewidths=2.5,
        color="black",
        zorder=3,
    )
    for x, r in zip(positions, measured, strict=True):
        # Above the bar or the target line, whichever is higher, so the two never overlap.
        ax.annotate(
            ratio_text(r),
            (x, max(heights[x], r.target)),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_yscale("log")
    ax.set_xticks(list(positions), [r.key for r in measured], rotation=35, ha="right")
    ax.set_ylabel("ratio (churn_rss, named_1m: MB)")
    ax.set_title(f"ctxlock {ctxlock.__version__}: cost relative to the anchor (lower is better)")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color="tab:green", label="ctxlock / anchor: meets"),
        Patch(color="tab:red", label="ctxlock / anchor: misses"),
        Line2D([], [], color="black", linewidth=2.5, label="target"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
