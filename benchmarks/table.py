"""Markdown tables of a ``benchmarks.run`` result, for the README and docs/benchmarks.md.

    python -m benchmarks.table benchmarks/results/<folder>/run_<date>_<gpu>.json [--dtypes bf16,fp32]
    python -m benchmarks.table benchmarks/results/<folder>/against_<date>_<gpu>.json   # a speed gate's table

Prints three tables (out of place, in place, host time per call) from the JSON alone, so the published figures are
the measured ones, with the run's environment above them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


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


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the tables of one run (``benchmarks.run``, or its ``--against`` speed gate); exit 2 for another
    file."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.table", description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run_<date>_<gpu>.json of benchmarks.run")
    parser.add_argument("--dtypes", default="bf16,fp16,fp32", help="comma-separated (default %(default)s)")
    args = parser.parse_args(argv)
    document = json.loads(args.run.read_text())
    env, dtypes = document["environment"], set(args.dtypes.split(","))
    if document.get("schema") == "rope-benchmark-against/1":
        against = document["against"]
        print(
            f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['date']}, kernel "
            f"SHA-256 `{env.get('kernel_sha256')}` against {against['revision']} (`{against['kernel_sha256']}`), "
            f"status {document['status']}\n"
        )
        print("\n".join(against_table(document, dtypes)) + "\n")
        return 0
    if document.get("schema") != "rope-benchmark-run/2":
        print(f"{args.run}: not a benchmarks.run result (schema {document.get('schema')!r})", file=sys.stderr)
        return 2
    print(
        f"{env['gpu']}, torch {env['torch']}, triton {env['triton']}, CUDA {env['cuda']}, {env['date']}, kernel "
        f"SHA-256 `{env.get('kernel_sha256')}`, {document.get('calibration', '')}, status {document['status']}\n"
    )
    for table in (
        out_of_place_table(document["rows"], dtypes),
        in_place_table(document["in_place"], dtypes),
        host_table(document["host"]),
    ):
        print("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
