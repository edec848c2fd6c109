"""CPU speed of the oracle and the truth, each as a multiple of plain passes over the same tensor timed in the same run.

From the repository root, on any machine (no GPU needed)::

    python -m benchmarks.oracle_speed                              # the BF16 query [1, 4096, 64, 512], one thread
    python -m benchmarks.oracle_speed --sequence 256 --json out.json

It times ``dsv41_rope.oracle.eager.apply_rope`` (the bits of eager CUDA, fed ``torch.polar`` frequencies made
beforehand) and ``dsv41_rope.oracle.truth.apply_rope`` (the float64 truth) on the same input, and two passes over that
input: a copy (``clone``) and a widening to float32 (``.float()``). Each row gives the median time of ``--repeats``
calls and its ratio to each pass, which says more than seconds on a shared or different machine. It prints a table and,
with ``--json``, writes the rows with the environment. Speed is measured here, never asserted in a test.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from dsv41_rope.harness import provenance
from dsv41_rope.oracle import eager, truth

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# The passes every row is divided by, and the column each ratio goes in.
PASSES = {"copy": "x copy", "widen": "x widen"}


def build_parser() -> argparse.ArgumentParser:
    """Returns the command-line parser."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.oracle_speed", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--sequence", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--pairs", type=int, default=32, help="rotary pairs (the last 2 * PAIRS channels rotate)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (numpy, under both, is single-threaded)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each function; the median is shown")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows and the environment here")
    return parser


def wall_times(fn: Callable[[], object], repeats: int) -> list[float]:
    """Returns the wall times of `repeats` calls of `fn`, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def measure(values: torch.Tensor, angles: torch.Tensor, repeats: int) -> list[dict[str, Any]]:
    """Times the two passes, the oracle and the truth on `values`; returns one row each, with ratios to the passes."""
    frequencies = torch.polar(torch.ones_like(angles), angles)
    functions = {
        "copy": values.clone,
        "widen": values.float,
        "dsv41_rope.oracle.eager.apply_rope": lambda: eager.apply_rope(values, frequencies),
        "dsv41_rope.oracle.truth.apply_rope": lambda: truth.apply_rope(values, angles),
    }
    for name in PASSES:
        functions[name]()  # first touch of the output pages stays out of the passes' times
    rows = []
    for name, fn in functions.items():
        times = wall_times(fn, repeats)
        rows.append({"function": name, "seconds": statistics.median(times), "all_seconds": times})
    passes = {row["function"]: row["seconds"] for row in rows if row["function"] in PASSES}
    for row in rows:
        for name, column in PASSES.items():
            row[column] = row["seconds"] / passes[name]
    return rows


def table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Lays the rows out as a fixed-width table."""
    header = f"{'function':<30} {'seconds':>10} " + " ".join(f"{column:>9}" for column in PASSES.values())
    lines = [header, "-" * len(header)]
    for row in rows:
        ratios = " ".join(f"{row[column]:>9.2f}" for column in PASSES.values())
        lines.append(f"{row['function']:<30} {row['seconds']:>10.4f} {ratios}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; returns the exit status."""
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(5)
    shape = (args.batch, args.sequence, args.heads, args.channels)
    values = torch.randn(shape, generator=generator).to(DTYPES[args.dtype])
    angles = torch.rand(1, args.sequence, args.pairs, generator=generator) * 4096
    mib = values.numel() * values.element_size() / 2**20
    threads = f"{args.threads} thread(s)"
    print(f"oracle speed: {list(shape)} {args.dtype} ({mib:.1f} MiB), {threads}, median of {args.repeats} calls")
    rows = measure(values, angles, args.repeats)
    print("\n".join(table(rows)))
    if args.json is not None:
        environment = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "threads": args.threads,
            **provenance.record(),
        }
        document = {"environment": environment, "shape": list(shape), "dtype": args.dtype, "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
