"""The matrix as Markdown: ``matrix.md`` beside a run's ``matrix.json``, and ``docs/matrix.md`` from the committed one.

    python -m dsv41_rope.matrix.table MATRIX_JSON               # print the Markdown
    python -m dsv41_rope.matrix.table --docs [--check]          # docs/matrix.md from docs/matrix/matrix.json

``--check`` exits 1 when ``docs/matrix.md`` is not what the committed JSON gives (a test runs it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dsv41_rope.matrix.columns import BIT_COLUMNS, ERROR_COLUMNS

__all__ = ["DOCS_JSON", "DOCS_PAGE", "main", "render"]

REPO = Path(__file__).resolve().parents[2]
DOCS_JSON = REPO / "docs" / "matrix" / "matrix.json"
DOCS_PAGE = REPO / "docs" / "matrix.md"
_SPEED_SHAPES = ("query", "window_kv", "index_query", "compressed_kv", "index_keys")


def _cell(row: dict[str, Any], title: str, repro_base: str) -> str:
    cell = row.get("cells", {}).get(title, "-")
    for repro in row.get("repros", []):
        if repro["column"] == title:
            link = f"{repro_base}/{row['peer']}/{Path(repro['path']).name}"
            suffix = "" if repro["reproduced"] else f", not reproduced alone on {repro.get('ran_on', 'its device')}"
            return f"[{cell}]({link}){suffix}"
    return cell


def _ulp(value: Any) -> str:
    return "-" if value is None else f"{value:.4g}"


def _judged(row: dict[str, Any]) -> bool:
    """Whether the row's run gave test outcomes (judged whole, or stopped at its time limit)."""
    return row.get("status") == "judged" or str(row.get("status", "")).startswith("stopped at")


def _status(row: dict[str, Any]) -> str:
    if not _judged(row):
        return row.get("status", "-").replace("|", "/")
    tests = row.get("tests", {})
    counts = ", ".join(f"{tests[k]} {k}" for k in ("passed", "failed", "error", "skipped") if tests.get(k))
    judged = "judged" if row.get("status") == "judged" else row["status"]
    return f"{judged}: {counts} in {row.get('seconds', 0):g} s"


def _bits_table(matrix: dict[str, Any], repro_base: str) -> list[str]:
    titles = [column.title for column in BIT_COLUMNS]
    header = ["peer", "version", *titles, *(f"norm-wise ulp {dtype.upper()}" for dtype in ERROR_COLUMNS), "run"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in matrix["rows"]:
        cells = [_cell(row, title, repro_base) if _judged(row) else "-" for title in titles]
        errors = [_ulp((row.get("normwise") or {}).get(dtype)) for dtype in ERROR_COLUMNS]
        version = row.get("installed") or row.get("pinned") or "-"
        lines.append("| " + " | ".join([row["peer"], str(version), *cells, *errors, _status(row)]) + " |")
    return lines


def _speed_table(speed: dict[str, Any]) -> list[str]:
    if "error" in speed or not speed.get("rows"):
        return [f"Not measured: {speed.get('error', 'no rows')}."]
    header = ["peer", *(f"{shape} fwd" for shape in _SPEED_SHAPES), *(f"{shape} fwd+bwd" for shape in _SPEED_SHAPES)]
    header += [f"host µs ({_SPEED_SHAPES[0]})"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in speed["rows"]:
        shapes = row.get("shapes", {})

        def ratio(shape: str, key: str, shapes: dict = shapes) -> str:
            cell = shapes.get(shape, {})
            value = cell.get(key)
            if value is not None:
                return f"{value:.3f}"
            return "error" if cell.get("error") else "-"

        host = shapes.get(_SPEED_SHAPES[0], {}).get("host_us")
        cells = [ratio(shape, "forward") for shape in _SPEED_SHAPES]
        cells += [ratio(shape, "forward_backward") for shape in _SPEED_SHAPES]
        lines.append("| " + " | ".join([row["peer"], *cells, "-" if host is None else f"{host:.1f}"]) + " |")
    return lines


def render(matrix: dict[str, Any], *, repro_base: str = "repros") -> str:
    """The matrix's Markdown: where and how it ran, the bits table (a FAIL links its reproduction), the speed table,
    and per peer what was adapted and what its run said."""
    project, environment = matrix.get("project", {}), matrix.get("environment", {})
    dirty = " (uncommitted changes)" if project.get("git_dirty") else ""
    commit = (project.get("git_commit") or "unknown")[:12] + dirty
    lines = [
        "# The DeepSeek V4 RoPE conformance matrix",
        "",
        f"On {environment.get('gpu', '-')}, torch {environment.get('torch')}, triton {environment.get('triton')}, "
        f"CUDA {environment.get('cuda')}; {project.get('version') or 'dsv41-rope'} at commit {commit}, kernel "
        f"`{project.get('kernel_sha256')}`; {matrix.get('created', '-')}. Each peer ran the installed conformance "
        f"suite (`dsv41-rope matrix`), {matrix.get('selection', 'the whole contract suite')}, in its own pytest "
        f"process, limited to {matrix.get('time_limit_s', '-')} s, cases at the {matrix.get('case_size', '-')} size, "
        "claims none.",
        "",
        *(
            [
                f"Its reproductions, written where it ran, were run on {matrix['reproductions_run_on']} (Triton's "
                "interpreter for Triton peers), whose eager path they compare with.",
                "",
            ]
            if matrix.get("reproductions_run_on")
            else []
        ),
        "## Bits against eager, and error against the float64 truth",
        "",
        "PASS: every test of the column passed; FAIL k/n: k of its n tests failed (each links a standalone "
        "reproduction, marked where it did not reproduce alone where it was run); n/a: no test of it ran (the run "
        "stopped before it, or no backward).",
        "",
        *_bits_table(matrix, repro_base),
        "",
        "## Speed",
        "",
        "BF16, GPU time over a copy of the same bytes (CUDA-graph replay; cold from 32 MiB, warm below), forward and "
        "forward with backward where the peer has one; host microseconds per call under no_grad.",
        "",
        *_speed_table(matrix.get("speed", {"error": "not run"})),
        "",
        "## Peers",
        "",
    ]
    for row in matrix["rows"]:
        lines.append(f"- **{row['peer']}** (`--rope-impl {row['adapter']}`): {row.get('peer_function', '-')}.")
        if row.get("notes"):
            lines.append(f"  {row['notes']}")
        if row.get("references"):
            lines.append(f"  Held to: {', '.join(row['references'])}.")
        for repro in row.get("repros", []):
            verdict = "reproduces" if repro["reproduced"] else "does not reproduce alone"
            where = repro.get("ran_on", "the matrix's device")
            lines.append(f"  {repro['column']}: `{Path(repro['path']).name}` {verdict} on {where}.")
        if row.get("repro_note"):
            lines.append(f"  {row['repro_note']}")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Prints or writes the Markdown; with ``--check``, 1 when docs/matrix.md is stale."""
    parser = argparse.ArgumentParser(prog="python -m dsv41_rope.matrix.table", description=__doc__.splitlines()[0])
    parser.add_argument("matrix", nargs="?", type=Path, help="a matrix.json (default with --docs: the committed one)")
    parser.add_argument("--docs", action="store_true", help=f"write {DOCS_PAGE.relative_to(REPO)}")
    parser.add_argument("--check", action="store_true", help="with --docs: exit 1 when the page is stale")
    args = parser.parse_args(argv)
    source = args.matrix or DOCS_JSON
    page = render(json.loads(source.read_text()), repro_base="matrix/repros" if args.docs else "repros")
    if not args.docs:
        print(page, end="")
        return 0
    if args.check:
        stale = not DOCS_PAGE.is_file() or DOCS_PAGE.read_text() != page
        print(f"{DOCS_PAGE.relative_to(REPO)} is {'stale' if stale else 'up to date'} with {source}")
        return 1 if stale else 0
    DOCS_PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
