"""The PNG plot of the elementwise ulp histograms (matplotlib is optional: the `report` extra)."""

from __future__ import annotations

import os
from pathlib import Path

from dsv41_rope.report.model import Report
from dsv41_rope.report.summary import bin_labels, shown_bins, summarize_groups

__all__ = ["PNG_NOT_REQUESTED", "PNG_NO_DATA", "PNG_NO_MATPLOTLIB", "PNG_WRITTEN", "write_histogram_png"]

# What became of the plot; the Markdown says which.
PNG_WRITTEN = "written"
PNG_NO_MATPLOTLIB = "no-matplotlib"
PNG_NO_DATA = "no-data"
PNG_NOT_REQUESTED = "not-requested"


def write_histogram_png(report: Report, path: str | os.PathLike[str]) -> str:
    """Plots the summed elementwise ulp histogram of each group, one step line per group, on a log count axis.

    Returns:
        PNG_WRITTEN, PNG_NO_DATA, or PNG_NO_MATPLOTLIB when matplotlib cannot be imported (the plot is optional).
    """
    groups = [g for g in summarize_groups(report.cases.values()) if g.histogram]
    if not groups:
        return PNG_NO_DATA
    try:
        # The object-oriented API needs no pyplot and no global backend switch, so the caller's state is untouched.
        from matplotlib.figure import Figure
    except ImportError:
        return PNG_NO_MATPLOTLIB
    bins = shown_bins(groups)
    figure = Figure(figsize=(max(6.0, 0.5 * bins + 3.0), 4.5), layout="constrained")
    axes = figure.add_subplot()
    for group in groups:
        axes.stairs(group.histogram[:bins], range(bins + 1), label=group.label, linewidth=1.5)
    axes.set_yscale("log")
    # Below one element: a bin holding one stays visible, empty bins drop off the bottom.
    axes.set_ylim(bottom=0.5)
    labels = bin_labels(report.histogram_edges, bins)
    axes.set_xticks([i + 0.5 for i in range(bins)], labels, rotation=30, ha="right", rotation_mode="anchor")
    axes.set_xlabel("elementwise error (ulp)")
    axes.set_ylabel("elements")
    axes.set_title("ulp drift: elementwise error against float64 truth")
    axes.legend(fontsize="small")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    return PNG_WRITTEN
