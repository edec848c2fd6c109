"""Measures the fused kernel's launch configurations, to choose the heuristics in ``dsv41_rope.kernel.launch_config``.

From the repository root, on a CUDA machine::

    python -m benchmarks.sweep --out benchmarks/results           # about 80 seconds on an H200
    python -m benchmarks.sweep --out benchmarks/results --quick   # DeepSeek V4.1's rows: 512 and 128 channels

For every channel count, pair count and dtype it times the forward launch on a ~256 MiB tensor under each
``LaunchConfig(block_rows, copy_channels, rotary_channels, num_warps)`` of a modest grid, passed to the launcher
(``dsv41_rope.kernel.rotate(..., config=...)``), by CUDA-graph replay, and divides by the time of ``clone()``: warm for
a tensor under ``COLD_FROM_BYTES`` (it stays in the L2 between calls, as the targets assume), cold from there and in
place. It prints the best configuration per group and how far the current ``dsv41_rope.kernel.launch_config`` choice is
from it, and writes ``sweep_<date>_<gpu>.json`` after every group.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import (
    COLD_FROM_BYTES,
    MIB,
    NO_CUDA_EXIT_CODE,
    Clock,
    GraphTimer,
    ResultFile,
    Timing,
    cuda_available,
    environment,
    short_error,
)
from benchmarks.shapes import CASES, PAIRS

# DeepSeek V4.1's own widths first (512: query and KV, 128: index query), so a run cut short covers them.
CHANNELS = (512, 128, 64, 192, 256, 576, 1024)
# DeepSeek V4.1's own tensors (benchmarks.shapes), 32 pairs, in BF16 and FP32 (the compressed KV in BF16: it shares
# the window KV's configuration key, so it shows how much the row count matters).
QUICK_GROUPS = (
    ("query", torch.bfloat16),
    ("query", torch.float32),
    ("index_query", torch.bfloat16),
    ("index_query", torch.float32),
    ("window_kv", torch.bfloat16),
    ("window_kv", torch.float32),
    ("compressed_kv", torch.bfloat16),
    ("index_keys", torch.bfloat16),
    ("index_keys", torch.float32),
)
IN_PLACE_GROUPS = (
    ("query", torch.bfloat16),
    ("query", torch.float32),
    ("index_query", torch.bfloat16),
    ("index_query", torch.float32),
    ("window_kv", torch.bfloat16),
    ("window_kv", torch.float32),
    ("compressed_kv", torch.bfloat16),
    ("compressed_kv", torch.float32),
    ("index_keys", torch.bfloat16),
    ("index_keys", torch.float32),
    ("large_2gb", torch.bfloat16),
    ("large_2gb", torch.float32),
)
DTYPES = (torch.bfloat16, torch.float32)
SEQUENCE = 4096
TENSOR_BYTES = 256 * MIB
# Elements of one chunk (rows per program x chunk width) and warps; (elements, warps) pairs outside
# ELEMENTS_PER_THREAD are dropped: fewer than 4 under-fill a 16-byte BF16 load, more than 16 hold a whole chunk in
# few threads. This keeps a group near 24 configurations: the whole sweep took 65-80 s on the H200.
BLOCK_ELEMENTS = (256, 512, 1024, 2048, 4096, 8192)
NUM_WARPS = (2, 4, 8)
ELEMENTS_PER_THREAD = (4, 32)
# In place a thread may hold a single pair (2 elements), from programs of 128 elements: where rows do not share cos/sin
# (3-D values), each pair costs a cos/sin of its own, whose latency a thread with one pair does not serialize.
IN_PLACE_BLOCK_ELEMENTS = (128, *BLOCK_ELEMENTS)
IN_PLACE_ELEMENTS_PER_THREAD = (2, 32)
# Copied-chunk widths: 64 channels is a whole 128-byte line in BF16; narrower chunks split lines. A chunk as wide as
# the copied part (rounded up to a power of two) copies a row in one masked access.
CHUNK_WIDTHS = (64, 128, 256, 512, 1024)
DEFAULT_TIME_BUDGET_S = 360.0


def pair_counts(channels: int) -> list[int]:
    """Pair counts swept for a channel count: 1, 32 (DeepSeek V4.1's) and all channels rotated, where they fit."""
    return sorted(pairs for pairs in {1, 32, channels // 2} if pairs <= channels // 2)


def chunk_widths(channels: int, pairs: int, default_width: int, quick: bool) -> list[int]:
    """Copied-chunk widths swept for one group: ``CHUNK_WIDTHS`` up to the copied part's width rounded up to a
    power of two (a wider chunk only adds masked lanes), and the heuristic's; ``quick``: the narrowest, the widest
    and the heuristic's."""
    widest = max(64, 1 << max(0, channels - 2 * pairs - 1).bit_length())
    widths = sorted({width for width in CHUNK_WIDTHS if width <= widest} | {default_width})
    return sorted({widths[0], widths[-1], default_width}) if quick else widths


def in_place_configs(rope: ModuleType, default: Any) -> list[Any]:
    """The grid of one in-place group, the current choice first: rows per program and warps, the rotary block in
    the default's chunk (in place copies nothing)."""
    configs = [default]
    least, most = IN_PLACE_ELEMENTS_PER_THREAD
    for elements in IN_PLACE_BLOCK_ELEMENTS:
        for num_warps in NUM_WARPS:
            per_thread = elements // (32 * num_warps)
            if elements >= default.rotary_channels and least <= per_thread <= most:
                block_rows = elements // default.rotary_channels
                config = rope.LaunchConfig(block_rows, default.copy_channels, default.rotary_channels, num_warps)
                if config not in configs:
                    configs.append(config)
    return configs


def candidate_configs(rope: ModuleType, channels: int, pairs: int, default: Any, quick: bool) -> list[Any]:
    """The grid of one group, the current heuristic's choice first.

    Args:
        rope: the ``dsv41_rope.kernel`` module.
        channels: channels of the values.
        pairs: rotary pairs.
        default: what ``dsv41_rope.kernel.launch_config`` chooses for this shape.
        quick: fewer chunk widths (see :func:`chunk_widths`).

    Returns:
        ``LaunchConfig`` instances, each once: copied chunks of each width, rotary chunks of the rotary block's
        width (a power of two, at most 256 channels), at each chunk size and warp count.
    """
    configs = [default]
    rotary_channels = min(1 << (2 * pairs - 1).bit_length(), 256)
    for copy_channels in chunk_widths(channels, pairs, default.copy_channels, quick):
        for elements in BLOCK_ELEMENTS:
            for num_warps in NUM_WARPS:
                per_thread = elements // (32 * num_warps)
                if elements >= copy_channels and ELEMENTS_PER_THREAD[0] <= per_thread <= ELEMENTS_PER_THREAD[1]:
                    config = rope.LaunchConfig(elements // copy_channels, copy_channels, rotary_channels, num_warps)
                    if config not in configs:
                        configs.append(config)
    return configs


def _config_json(config: Any) -> dict[str, int]:
    return dataclasses.asdict(config)


def _config_label(config: dict[str, int]) -> str:
    return f"R{config['block_rows']} K{config['copy_channels']}/{config['rotary_channels']} w{config['num_warps']}"


def sweep_group(
    rope: ModuleType,
    values: torch.Tensor,
    pairs: int,
    copy: Timing,
    timer: GraphTimer,
    clock: Clock,
    quick: bool = False,
    in_place: bool = False,
) -> dict[str, Any]:
    """Times every candidate configuration of one (channels, pairs, dtype) group, out of place or in place.

    A configuration whose output differs in any bit from the current heuristic's output is recorded with an error
    and left out of the choice: every valid configuration computes the same roundings.

    Args:
        rope: the ``dsv41_rope.kernel`` module.
        values: ``[batch, sequence, (heads,) channels]``.
        pairs: rotary pairs.
        copy: time of ``clone()`` of ``values``.
        timer: times each configuration.
        clock: stops the group early, marking it incomplete, once the time budget is spent.
        quick: fewer chunk widths.
        in_place: sweep the in-place launch (``apply_rope_triton_``'s), which rotates a scratch copy of ``values``.

    Returns:
        The group's JSON row.
    """
    channels = values.shape[-1]
    rows = values.numel() // channels
    angles = torch.rand(1, values.shape[1], pairs, device="cuda") * 6.2831853 - 3.1415927
    heads = values.shape[2] if values.dim() == 4 else 1
    default = rope.launch_config(rows, channels, pairs, values.element_size(), heads, in_place=in_place)

    def launch(config: Any, target: torch.Tensor | None = None) -> torch.Tensor:
        if in_place:
            target = values.clone() if target is None else target
            return rope.rotate(target, angles, False, in_place=True, config=config)
        return rope.rotate(values, angles, False, config=config)

    tensor_bytes = values.numel() * values.element_size()
    # Ranked by the time the targets use: warm below COLD_FROM_BYTES (the tensor stays in the L2 between calls), cold
    # from there and in place (whose targets are cold).
    mode = "cold" if in_place or tensor_bytes >= COLD_FROM_BYTES else "warm"
    reference = launch(default)
    scratch = values.clone()  # rotated again by every timed in-place call: its time does not depend on the values
    results = []
    complete = True
    configs = in_place_configs(rope, default) if in_place else candidate_configs(rope, channels, pairs, default, quick)
    for config in configs:
        if clock.expired():
            complete = False
            break
        entry: dict[str, Any] = {**_config_json(config), "times_ms": None, "ratio_to_copy": None, "error": None}
        try:
            if not torch.equal(launch(config), reference):
                raise ValueError("output differs from the current heuristic's output")
            timing = timer.time(lambda config=config: launch(config, scratch))
            entry["times_ms"] = timing.to_json()
            entry["ratio_to_copy"] = getattr(timing, f"{mode}_ms") / getattr(copy, f"{mode}_ms")
        except Exception as error:  # an unlaunchable configuration (too many registers, say) is data, not a crash
            entry["error"] = short_error(error)
        results.append(entry)
    timed = [entry for entry in results if entry["ratio_to_copy"] is not None]
    best = min(timed, key=lambda entry: entry["ratio_to_copy"], default=None)
    chosen = results[0] if results else None  # candidate_configs puts the current choice first
    default_over_best = None
    if best is not None and chosen is not None and chosen["ratio_to_copy"] is not None:
        default_over_best = chosen["ratio_to_copy"] / best["ratio_to_copy"]
    return {
        "in_place": in_place,
        "channels": channels,
        "pairs": pairs,
        "dtype": str(values.dtype).removeprefix("torch."),
        "shape": list(values.shape),
        "rows": rows,
        "tensor_bytes": tensor_bytes,
        "ranked_by": mode,
        "copy_ms": copy.to_json(),
        "default": _config_json(default),
        "default_ratio_to_copy": None if chosen is None else chosen["ratio_to_copy"],
        "best": None if best is None else {k: best[k] for k in _config_json(default)},
        "best_ratio_to_copy": None if best is None else best["ratio_to_copy"],
        "default_over_best": default_over_best,
        "complete": complete,
        "configs": results,
    }


def format_group(row: dict[str, Any]) -> str:
    """One summary line: the best configuration and the current choice, each as a multiple of the copy time."""
    dtype = row["dtype"].replace("bfloat", "bf").replace("float", "fp")
    head = f"{str(row['shape']):<20} P={row['pairs']:<4} {dtype:<5}{' in place' if row.get('in_place') else ''}"
    if row["best"] is None:
        errors = {entry["error"] for entry in row["configs"] if entry["error"]}
        return f"{head} no configuration ran: {'; '.join(sorted(errors)) or 'time budget spent'}"
    line = f"{head} best {_config_label(row['best']):<16} {row['best_ratio_to_copy']:.3f}x copy"
    default = f"default {_config_label(row['default']):<16}"
    if row["default_over_best"] is None:
        line += f"   {default} did not run"
    else:
        line += f"   {default} {row['default_ratio_to_copy']:.3f}x copy (+{100 * (row['default_over_best'] - 1):.1f}%)"
    return line + ("" if row["complete"] else "   [incomplete: time budget]")


def plan(
    quick: bool, in_place: bool = False, cases: Sequence[str] | None = None
) -> Iterator[tuple[tuple[int, ...], torch.dtype, int]]:
    """The (shape, dtype, pairs) groups in the order they are swept; ``quick``: DeepSeek V4.1's own tensors;
    ``in_place``: the tensors DeepSeek V4.1 may rotate in place; ``cases``: only these of them."""
    if in_place or quick:
        for name, dtype in IN_PLACE_GROUPS if in_place else QUICK_GROUPS:
            if cases is None or name in cases:
                yield CASES[name].shape, dtype, PAIRS
        return
    for channels in CHANNELS:
        for dtype in DTYPES:
            heads = max(1, TENSOR_BYTES // (SEQUENCE * channels * dtype.itemsize))
            for pairs in pair_counts(channels):
                yield (1, SEQUENCE, heads, channels), dtype, pairs


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="folder for the JSON")
    parser.add_argument("--quick", action="store_true", help="DeepSeek V4.1's rows: 512 and 128 channels")
    parser.add_argument(
        "--in-place", action="store_true", help="DeepSeek V4.1's tensors rotated in place (the in-place launch)"
    )
    parser.add_argument(
        "--cases",
        type=lambda text: text.split(","),
        metavar="NAME,...",
        help=f"with --quick or --in-place, only these tensors (of {', '.join(CASES)})",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        default=DEFAULT_TIME_BUDGET_S,
        metavar="SECONDS",
        help="time no new configuration after this many seconds; the groups so far are kept (default: %(default)g)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the sweep and returns the exit status: 0 when done or stopped by the budget, 2 without CUDA."""
    args = parse_args(argv)
    if not cuda_available("benchmarks.sweep"):
        return NO_CUDA_EXIT_CODE
    from dsv41_rope import kernel as rope

    clock = Clock(args.time_budget)
    timer = GraphTimer()
    document = {
        "schema": "rope-benchmark-sweep/1",
        "status": "running",
        "environment": environment(),
        "settings": {
            "argv": sys.argv[1:] if argv is None else list(argv),
            "sequence": SEQUENCE,
            "tensor_bytes_target": TENSOR_BYTES,
            "block_elements": list(BLOCK_ELEMENTS),
            "num_warps": list(NUM_WARPS),
            "elements_per_thread": list(IN_PLACE_ELEMENTS_PER_THREAD if args.in_place else ELEMENTS_PER_THREAD),
            "in_place_block_elements": list(IN_PLACE_BLOCK_ELEMENTS),
            "chunk_widths": list(CHUNK_WIDTHS),
            "replays": timer.replays,
            "time_budget_s": args.time_budget,
            "in_place": args.in_place,
        },
        "rows": [],
    }
    results = ResultFile(args.out, "sweep", document)
    clock.log(f"writing {results.path}")
    status = "complete"
    values = None
    try:
        for shape, dtype, pairs in plan(args.quick, args.in_place, args.cases):
            if clock.expired():
                status = f"stopped: time budget of {args.time_budget:g} s spent"
                break
            if values is None or values.shape != shape or values.dtype != dtype:
                values = torch.randn(shape, dtype=dtype, device="cuda")
                values.clone()
                copy = timer.time_copy(values.clone)
            row = sweep_group(rope, values, pairs, copy, timer, clock, args.quick, args.in_place)
            results.add_row(row)
            clock.log(format_group(row))
    except KeyboardInterrupt:
        status = "interrupted"
    results.finish(status)
    print(f"\nbest launch configuration per group ({status}):")
    for row in document["rows"]:
        print(format_group(row))
    clock.log(f"wrote {results.path}")
    return 130 if status == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
