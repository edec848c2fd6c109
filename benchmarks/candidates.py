"""Candidate kernel structures, measured against the production kernel: the record behind choosing one.

The production kernel (``impl.rope_triton``) gives each program BLOCK_R whole rows and streams them in chunks of
BLOCK_K channels, copied part first, then the rotary block. Until 2026-12-02 it used the ``channel-tiles``
structure kept here: a 2-D grid in which a program owns one BLOCK_R x BLOCK_K tile of one channel range, so that
the row decomposition (batch, position, head) is repeated for every tile of a row. On the H200 whole rows were
faster on every large shape (``benchmarks/results/h200-2026-12-02-f7433fe-tail-chunks/candidates.json``); this
runner re-checks that on another GPU. Addressing and numerics are the production kernel's own ``_row_pointers``
and ``_rotate_tile``, and every candidate's bits are compared with the production kernel's before it is timed.

Run on a CUDA machine from the repository root: ``python -m benchmarks.candidates [--out DIR]``. For each shape and
dtype it prints the production kernel and each candidate configuration as multiples of a ``clone`` of the same
tensor (cold L2, CUDA events: ``benchmarks.common.GpuTimer``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

from benchmarks.common import NO_CUDA_EXIT_CODE, GpuTimer, cuda_available, environment
from impl.rope_triton import _rotate_tile, _row_pointers, apply_rope_triton

SHAPES = {
    "query": (1, 4096, 64, 512),
    "index-query": (1, 4096, 32, 128),
    "window-kv": (1, 4096, 512),
    "large": (1, 8192, 128, 1024),
}
PAIRS = 32
# (rows per tile, channels per tile, warps) for the channel-tiles candidate; the first is its old heuristic.
CHANNEL_TILE_CONFIGS = ((64, 64, 4), (16, 64, 4), (32, 128, 4), (16, 128, 4))


@triton.jit
def _channel_tiles_kernel(
    values_ptr,
    frequencies_ptr,
    output_ptr,
    rows,
    sequence,
    heads,
    channels,
    pairs,
    pair_offset,
    stride_batch,
    stride_sequence,
    stride_head,
    NEGATE_SIN: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """The production kernel's arguments and arithmetic; program (i, j) owns tile j of rows block i."""
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    source, target, position = _row_pointers(
        values_ptr, output_ptr, row, sequence, heads, channels, stride_batch, stride_sequence, stride_head
    )
    copy_tiles = tl.cdiv(pair_offset, BLOCK_K)
    tile = tl.program_id(1)
    if tile < copy_tiles:
        channel = tile * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = (row < rows)[:, None] & (channel < pair_offset)[None, :]
        tl.store(target + channel[None, :], tl.load(source + channel[None, :], mask=mask), mask=mask)
    else:
        local = (tile - copy_tiles) * BLOCK_K + tl.arange(0, BLOCK_K)
        mask = (row < rows)[:, None] & (local < 2 * pairs)[None, :]
        frequency_row = frequencies_ptr + (position.to(tl.int64) * (2 * pairs))[:, None]
        _rotate_tile(
            source + pair_offset, target + pair_offset, frequency_row, local, mask, NEGATE_SIN, BLOCK_R, BLOCK_K
        )


def channel_tiles(values: torch.Tensor, angles: torch.Tensor, config: tuple[int, int, int]) -> torch.Tensor:
    """The candidate's forward for contiguous values and angles ``[1, S, P]``, torch.polar included."""
    block_rows, block_channels, num_warps = config
    frequencies = torch.view_as_real(torch.polar(torch.ones_like(angles), angles)).contiguous()
    heads = values.shape[2] if values.dim() == 4 else 1
    rows = values.numel() // values.shape[-1]
    channels, pairs = values.shape[-1], angles.shape[-1]
    output = torch.empty_like(values)
    grid = (
        triton.cdiv(rows, block_rows),
        triton.cdiv(channels - 2 * pairs, block_channels) + triton.cdiv(2 * pairs, block_channels),
    )
    _channel_tiles_kernel[grid](
        values,
        frequencies,
        output,
        rows,
        values.shape[1],
        heads,
        channels,
        pairs,
        channels - 2 * pairs,
        values.stride(0),
        values.stride(1),
        values.stride(2) if values.dim() == 4 else 0,
        NEGATE_SIN=False,
        BLOCK_R=block_rows,
        BLOCK_K=block_channels,
        num_warps=num_warps,
    )
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for candidates.json")
    args = parser.parse_args(argv)
    if not cuda_available("benchmarks.candidates"):
        return NO_CUDA_EXIT_CODE
    timer = GpuTimer(warmup_ms=25.0, rep_ms=100.0)
    rows = []
    for name, shape in SHAPES.items():
        for dtype in (torch.bfloat16, torch.float32):
            values = torch.randn(shape, device="cuda").to(dtype)
            angles = torch.rand((1, shape[1], PAIRS), device="cuda") * 4096
            reference = apply_rope_triton(values, angles)
            copy = timer.time(values.clone).median_ms
            results = {"production": timer.time(lambda v=values, a=angles: apply_rope_triton(v, a)).median_ms / copy}
            for config in CHANNEL_TILE_CONFIGS:
                label = "channel-tiles R{} K{} w{}".format(*config)
                integer = torch.int16 if dtype == torch.bfloat16 else torch.int32
                if not torch.equal(channel_tiles(values, angles, config).view(integer), reference.view(integer)):
                    results[label] = "bits differ"
                    continue
                timing = timer.time(lambda v=values, a=angles, c=config: channel_tiles(v, a, c))
                results[label] = timing.median_ms / copy
            row = {"shape": name, "dtype": str(dtype).removeprefix("torch."), "copy_ms": copy, "x_copy": results}
            rows.append(row)
            print(json.dumps(row), flush=True)
            del values, reference
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "candidates.json").write_text(json.dumps({"environment": environment(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
