"""Markdown tables of ``benchmarks.run`` results, and the generated results blocks of the committed docs.

    python -m benchmarks.table RUN_OR_GATE.json [--dtypes bf16,fp32]   # a run's or a speed gate's tables
    python -m benchmarks.table --index   # rewrite benchmarks/results/index.json from the JSON files beside it
    python -m benchmarks.table --docs    # rewrite the generated blocks of README.md and docs/benchmarks.md
    python -m benchmarks.table --check   # exit 1 where the index or a block differs from what would be written

Every table comes from the JSON alone, so the published figures are the measured ones. The index lists each committed
result file with what its JSON records (kind, GPU, date, kernel, commit) and what it backs (``backs``, written by hand
and kept when the index is rewritten). A generated block lies between ``<!-- NAME:begin -->`` and
``<!-- NAME:end -->`` in a doc; its source is the file whose ``backs`` holds ``DOC#NAME``. Imports no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
REPO = Path(__file__).resolve().parents[1]
RESULTS = Path("benchmarks") / "results"
INDEX = RESULTS / "index.json"
INDEX_SCHEMA = "rope-results-index/1"
# The status table's columns: (dtype, operation) of a speed gate's rows.
STATUS_COLUMNS = [(dtype, op) for dtype in ("bfloat16", "float32") for op in ("forward", "backward", "in place")]


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def out_of_place_table(rows: list[dict[str, Any]], dtypes: set[str]) -> list[str]:
    """One line per case, dtype and operation: GPU time warm and cold, host time, and the ratios of the run."""
    lines = [
        "| case | dtype | op | MiB | fused us (warm / cold) | host us | x copy (warm / cold) | vs eager (warm / cold) "
        "| vs compile (warm / cold) | peak MiB fused / eager | targets missed |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        dtype = SHORT[row["dtype"]]
        fused = row["times_ms"].get("fused")
        if dtype not in dtypes or fused is None:
            continue
        peaks = row["peak_extra_bytes"] or {}
        peak = (
            f"{peaks['fused'] / 2**20:.0f} / {peaks['eager'] / 2**20:.0f}" if {"fused", "eager"} <= peaks.keys() else ""
        )
        missed = ", ".join(
            f"{c['target']} {c['comparison']} {c['bound']:g}" for c in row["targets"] if c["passed"] is False
        )

        def pair(ratios: dict[str, float | None]) -> str:
            return f"{_cell(ratios['warm'], '.3f')} / {_cell(ratios['cold'], '.3f')}"

        lines.append(
            f"| {row['case']} | {dtype} | {row['op']} | {row['tensor_bytes'] / 2**20:.0f} | "
            f"{fused['warm'] * 1e3:.1f} / {fused['cold'] * 1e3:.1f} | {fused['host'] * 1e3:.0f} | "
            f"{pair(row['ratio_to_copy'])} | {pair(row['speedup_vs_eager'])} | {pair(row['speedup_vs_compile'])} | "
            f"{peak} | {missed or '-'} |"
        )
    return lines


def in_place_table(rows: list[dict[str, Any]], dtypes: set[str]) -> list[str]:
    """One line per case and dtype of the in-place section (cold L2, host time excluded)."""
    lines = [
        "| case | dtype | in place us (cold) | x copy | x bytes floor | x out of place | x flash-attention "
        "| host us in place / out of place | elements flash-attention differs |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        dtype = SHORT[row["dtype"]]
        if dtype not in dtypes:
            continue
        times = row["times_ms"]
        lines.append(
            f"| {row['case']} | {dtype} | {times['in_place']['cold'] * 1e3:.1f} | {row['ratio_to_copy']:.3f} | "
            f"{row['ratio_to_floor']:.2f} | {row['ratio_to_out_of_place']:.3f} | {_cell(row['ratio_to_flash'], '.3f')} "
            f"| {times['in_place']['host'] * 1e3:.0f} / {times['out_of_place']['host'] * 1e3:.0f} | "
            f"{row.get('flash_differs', '-')} |"
        )
    return lines


def host_table(rows: list[dict[str, Any]]) -> list[str]:
    """Host time per call over back-to-back calls on a tiny tensor, with the ratio to eager's in the same mode."""
    lines = ["| mode | call | host us per call | x eager |", "|---|---|---|---|"]
    lines += [f"| {r['mode']} | {r['impl']} | {r['host_us']:.1f} | {r['ratio_to_eager']:.3f} |" for r in rows]
    return lines


def against_table(document: dict[str, Any], dtypes: set[str]) -> list[str]:
    """One line per case, dtype and operation of a ``benchmarks.run --against`` result: our GPU time and the
    revision's, their ratio, and ours, the revision's, the sketch's and flash-attention's over the copy."""
    revision = document["against"]["revision"]
    lines = [
        f"| case | dtype | op | L2 | ours us | {revision} us | ours / {revision} | ours x copy | {revision} x copy "
        "| sketch x copy | flash-attention x copy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in document["rows"]:
        dtype = SHORT[row["dtype"]]
        if dtype not in dtypes:
            continue
        over_copy = {
            key: f"{row[key] / row['copy_ms']:.3f}" if key in row else "-"
            for key in ("ours_ms", "theirs_ms", "sketch_ms", "flash_ms")
        }
        theirs = f"{row['theirs_ms'] * 1e3:.1f}" if "theirs_ms" in row else "-"
        ratio = f"{row['ratio']:.3f}" + (" **slower**" if row.get("slower") else "") if "ratio" in row else "-"
        cells = [row["case"], dtype, row["op"], row["l2"], f"{row['ours_ms'] * 1e3:.1f}", theirs, ratio]
        lines.append("| " + " | ".join(cells + list(over_copy.values())) + " |")
    return lines


def environment_line(document: dict[str, Any]) -> str:
    """The line above a run's or a gate's tables: GPU, versions, date, kernel and, for a gate, the revision."""
    env = document["environment"]
    line = f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['date']}, kernel "
    line += f"SHA-256 `{env.get('kernel_sha256')}`"
    if "against" in document:
        line += f" against {document['against']['revision']} (`{document['against']['kernel_sha256']}`)"
    else:
        line += f", {document.get('calibration', '')}"
    return line + f", status {document['status']}"


# -- the index of benchmarks/results ----------------------------------------------------------------------------------


def utc_date(text: str) -> str:
    """An ISO 8601 time with an offset as UTC, e.g. ``2026-12-07T01:25:25+00:00`` -> ``2026-12-07T01:25:25Z``."""
    return datetime.fromisoformat(text).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(path: Path, root: Path = REPO) -> dict[str, Any]:
    """The index entry of one result file, from what its JSON records (``backs`` left empty).

    Args:
        path: a ``benchmarks.run``, ``--against``, ``benchmarks.sweep`` or ``benchmarks.stages`` JSON file.
        root: the repository root, which the entry's path is relative to.

    Returns:
        path, kind (``run``, ``against``, ``sweep``, ``stages``: from the schema), gpu, date (UTC), kernel_sha256,
        git_commit and git_dirty where recorded, status, and for a speed gate the revision and its kernel_sha256.
    """
    document = json.loads(path.read_text(encoding="utf-8"))
    schema = str(document.get("schema", ""))
    env = document.get("environment", {})
    entry: dict[str, Any] = {
        "path": path.relative_to(root).as_posix(),
        "kind": schema.removeprefix("rope-benchmark-").split("/")[0] or "unknown",
        "gpu": env.get("gpu"),
        "date": utc_date(env["date"]) if env.get("date") else None,
        "kernel_sha256": env.get("kernel_sha256"),
    }
    if env.get("git_commit"):
        entry["git_commit"], entry["git_dirty"] = env["git_commit"], env.get("git_dirty")
    entry["status"] = document.get("status")
    if "against" in document:
        entry["against"] = {key: document["against"][key] for key in ("revision", "kernel_sha256")}
    entry["backs"] = []
    return entry


def build_index(previous: dict[str, Any] | None, root: Path = REPO) -> dict[str, Any]:
    """The index of every JSON file under ``benchmarks/results`` (but the index), keeping each file's ``backs``.

    Args:
        previous: the committed index, whose ``backs`` are kept for the files still there; None for none.
        root: the repository root.
    """
    backs = {entry["path"]: entry["backs"] for entry in (previous or {}).get("files", [])}
    files = []
    for path in sorted((root / RESULTS).rglob("*.json")):
        if path != root / INDEX:
            entry = describe(path, root)
            entry["backs"] = backs.get(entry["path"], [])
            files.append(entry)
    return {"schema": INDEX_SCHEMA, "files": files}


def index_text(index: dict[str, Any]) -> str:
    """The index as committed: indented JSON with a final newline."""
    return json.dumps(index, indent=2) + "\n"


def read_index(root: Path = REPO) -> dict[str, Any] | None:
    """The committed index, or None where there is none."""
    path = root / INDEX
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def source_of(index: dict[str, Any], anchor: str, root: Path = REPO) -> tuple[str, dict[str, Any]]:
    """The one indexed file whose ``backs`` holds ``anchor`` (``DOC#BLOCK``), as its path and its JSON document.

    Raises:
        ValueError: no file, or more than one, backs the anchor.
    """
    paths = [entry["path"] for entry in index["files"] if anchor in entry["backs"]]
    if len(paths) != 1:
        raise ValueError(f"{INDEX}: {len(paths)} files back {anchor}, expected one: {paths}")
    return paths[0], json.loads((root / paths[0]).read_text(encoding="utf-8"))


# -- the generated blocks of the docs ---------------------------------------------------------------------------------


def results_block(path: str, document: dict[str, Any]) -> list[str]:
    """docs/benchmarks.md's results: the speed gate's environment line and its table, every dtype."""
    return [f"From `{path}`:", "", environment_line(document), "", *against_table(document, set(SHORT.values()))]


def status_block(path: str, document: dict[str, Any]) -> list[str]:
    """README.md's status: per DeepSeek tensor, our GPU time over a copy of the same bytes, from a speed gate."""
    env = document["environment"]
    ratios: dict[str, dict[tuple[str, str], float]] = {}
    shapes, caches = {}, {}
    for row in document["rows"]:
        ratios.setdefault(row["case"], {})[row["dtype"], row["op"]] = row["ours_ms"] / row["copy_ms"]
        shapes.setdefault(row["case"], "x".join(str(size) for size in row["shape"]))
        caches.setdefault(row["case"], row["l2"])
    header = " | ".join(f"{SHORT[dtype].upper()} {op}" for dtype, op in STATUS_COLUMNS)
    lines = [
        f"Kernel `{env['kernel_sha256']}` on an {env['gpu']}, {utc_date(env['date'])[:10]} (torch {env['torch']}, "
        f"triton {env['triton']}, CUDA {env['cuda']}).",
        f"GPU time over a copy of the same bytes, cold from 32 MiB and warm below, from `{path}`:",
        "",
        f"| tensor | shape | L2 | {header} |",
        "|---" * (3 + len(STATUS_COLUMNS)) + "|",
    ]
    for case, cells in ratios.items():
        figures = " | ".join(_cell(cells.get(column), ".3f") for column in STATUS_COLUMNS)
        lines.append(f"| {case} | {shapes[case]} | {caches[case]} | {figures} |")
    return lines


# Each generated block: (doc, block name) -> how its lines are made from its source file.
BLOCKS: dict[tuple[str, str], Callable[[str, dict[str, Any]], list[str]]] = {
    ("README.md", "status"): status_block,
    ("docs/benchmarks.md", "results"): results_block,
}


def replace_block(text: str, name: str, lines: list[str]) -> str:
    """``text`` with the lines between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` replaced by ``lines``.

    Raises:
        ValueError: the markers are missing, repeated or out of order.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one {begin} before one {end}")
    head, rest = text.split(begin, 1)
    tail = rest.split(end, 1)[1]
    return head + begin + "\n" + "\n".join(lines) + "\n" + end + tail


def generated_docs(index: dict[str, Any], root: Path = REPO) -> dict[str, str]:
    """Each doc with a generated block, as it would be written: doc path -> text."""
    texts: dict[str, str] = {}
    for (doc, name), render in BLOCKS.items():
        text = texts.get(doc) or (root / doc).read_text(encoding="utf-8")
        path, document = source_of(index, f"{doc}#{name}", root)
        try:
            texts[doc] = replace_block(text, name, render(path, document))
        except ValueError as error:
            raise ValueError(f"{doc}: {error}") from error
    return texts


def check(root: Path = REPO) -> list[str]:
    """What differs from what ``--index`` and ``--docs`` would write, one line each; empty when nothing does."""
    committed = read_index(root)
    if committed is None:
        return [f"{INDEX} is missing: python -m benchmarks.table --index"]
    problems = []
    if index_text(build_index(committed, root)) != index_text(committed):
        problems.append(f"{INDEX} differs from the result files: python -m benchmarks.table --index")
    for entry in committed["files"]:
        for anchor in entry["backs"]:
            if not (root / anchor.split("#", 1)[0]).exists():
                problems.append(f"{INDEX}: {entry['path']} backs {anchor}, which does not exist")
    try:
        for doc, text in generated_docs(committed, root).items():
            if (root / doc).read_text(encoding="utf-8") != text:
                problems.append(f"{doc}: a generated block differs: python -m benchmarks.table --docs")
    except ValueError as error:
        problems.append(str(error))
    return problems


def print_tables(path: Path, dtypes: set[str]) -> int:
    """Prints the tables of one run (``benchmarks.run``, or its ``--against`` speed gate); 2 for another file."""
    document = json.loads(path.read_text(encoding="utf-8"))
    if document.get("schema") == "rope-benchmark-against/1":
        print(environment_line(document) + "\n")
        print("\n".join(against_table(document, dtypes)) + "\n")
        return 0
    if document.get("schema") != "rope-benchmark-run/2":
        print(f"{path}: not a benchmarks.run result (schema {document.get('schema')!r})", file=sys.stderr)
        return 2
    print(environment_line(document) + "\n")
    for table in (
        out_of_place_table(document["rows"], dtypes),
        in_place_table(document["in_place"], dtypes),
        host_table(document["host"]),
    ):
        print("\n".join(table) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line (the module docstring).

    Returns:
        0, or 1 for ``--check`` when something differs (or a block's source or markers are wrong), 2 for a file that
        is not a run or a gate.
    """
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, nargs="?", help="a run_*.json or against-*.json of benchmarks.run")
    parser.add_argument("--dtypes", default="bf16,fp16,fp32", help="comma-separated (default %(default)s)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--index", action="store_true", help=f"rewrite {INDEX} from the result files")
    mode.add_argument("--docs", action="store_true", help="rewrite the docs' generated blocks from the index")
    mode.add_argument("--check", action="store_true", help="exit 1 where the index or a generated block differs")
    args = parser.parse_args(argv)
    if args.run is not None:
        if args.index or args.docs or args.check:
            parser.error("give a result file or one of --index, --docs, --check")
        return print_tables(args.run, set(args.dtypes.split(",")))
    if args.index:
        (REPO / INDEX).write_text(index_text(build_index(read_index())), encoding="utf-8")
        return 0
    if args.docs:
        index = read_index()
        if index is None:
            print(f"{INDEX} is missing: python -m benchmarks.table --index", file=sys.stderr)
            return 1
        try:
            texts = generated_docs(index)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 1
        for doc, text in texts.items():
            (REPO / doc).write_text(text, encoding="utf-8")
        return 0
    if args.check:
        problems = check()
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    parser.error("give a result file or one of --index, --docs, --check")
    return 2


if __name__ == "__main__":
    sys.exit(main())
