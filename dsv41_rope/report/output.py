"""Where a report goes: its directory (JSON, Markdown, PNG) and the CI job page."""

from __future__ import annotations

import os
from pathlib import Path

from dsv41_rope.report.baseline import BaselineComparison
from dsv41_rope.report.model import JSON_NAME, MARKDOWN_NAME, PNG_NAME, Report
from dsv41_rope.report.plot import PNG_WRITTEN, write_histogram_png
from dsv41_rope.report.render_markdown import render_markdown

__all__ = ["append_step_summary", "write_report"]


def write_report(
    report: Report, directory: str | os.PathLike[str], comparison: BaselineComparison | None = None
) -> tuple[list[Path], str]:
    """Writes ulp-drift.json, ulp-drift.md and, when matplotlib imports, ulp-drift.png into `directory`.

    Returns:
        The paths written and the Markdown text (for the CI step summary).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = [report.write_json(directory / JSON_NAME)]
    png = write_histogram_png(report, directory / PNG_NAME)
    if png == PNG_WRITTEN:
        written.append(directory / PNG_NAME)
    markdown = render_markdown(report, comparison, png)
    (directory / MARKDOWN_NAME).write_text(markdown, encoding="utf-8")
    written.insert(1, directory / MARKDOWN_NAME)
    return written, markdown


def append_step_summary(markdown: str) -> Path | None:
    """Appends `markdown` to the file named by GITHUB_STEP_SUMMARY (the CI job page), if that variable is set."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as stream:
        stream.write(markdown if markdown.endswith("\n") else markdown + "\n")
    return Path(target)
