"""Launch configurations: how many whole rows a program owns, the chunk widths it moves them in, and its warps.

DeepSeek V4.1's own tensors take the configuration a sweep measured fastest (``tuning.json``, data with one line of
reason per entry); every other tensor takes :func:`launch_config`'s rule.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from .runtime import INTERPRETED, triton

__all__ = [
    "ELEMENTS_PER_PROGRAM",
    "MAX_ROWS",
    "TUNED_CONFIGS",
    "LaunchConfig",
    "launch_config",
    "shares_frequencies",
]

# The most elements one chunk of a program holds (BLOCK_R rows x chunk channels).
ELEMENTS_PER_PROGRAM = 4096
# Row indices are 32-bit in the kernel, with room for the last tile's masked rows.
MAX_ROWS = 2**31 - 1 - ELEMENTS_PER_PROGRAM


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and warps of one launch of the kernel: ``block_rows`` whole rows per program, moved in chunks of
    ``copy_channels`` copied and ``rotary_channels`` rotary channels (powers of two)."""

    block_rows: int
    copy_channels: int
    rotary_channels: int
    num_warps: int


def _tuned_configs() -> dict[tuple[int, int, int, int, bool], LaunchConfig]:
    """``tuning.json`` as ``(channels, pairs, element size, heads, in place) -> LaunchConfig``."""
    table = json.loads((Path(__file__).parent / "tuning.json").read_text(encoding="utf-8"))
    fields = [field.name for field in dataclasses.fields(LaunchConfig)]
    return {
        tuple(entry[name] for name in table["key"]): LaunchConfig(**{name: entry[name] for name in fields})
        for entry in table["entries"]
    }


TUNED_CONFIGS = _tuned_configs()


def launch_config(
    rows: int, channels: int, pairs: int, element_size: int, heads: int = 1, in_place: bool = False
) -> LaunchConfig:
    """Choose rows per program, chunk widths and warps for a tensor of ``rows`` x ``channels``.

    DeepSeek V4.1's own tensors take the tuned configuration (``TUNED_CONFIGS``). Otherwise: the copied part and the
    rotary block each in one chunk as wide as it is, rounded up to a power of two (at most 1024 channels), as many
    rows as make 4 KiB of the widest chunk, on 2 warps: the sweeps' fastest programs hold a few KiB of whole rows, and
    a program then has all its loads in flight at once. In place, which copies nothing: 4 KiB of the rotary block on 2
    warps where heads share cos/sin, and one pair a thread on 4 warps where every row computes its own (3-D values: a
    thread then waits for one cos/sin, not several in a row). With several heads, rows per program divide the heads
    where a power of two of at least 4 does, so that a program's rows share one position's cos/sin. A program that
    computes cos/sin for more than 2 pairs a thread gets more warps, up to 8: libdevice's ``cos`` and ``sin`` are
    inlined for every pair a thread holds, and many of them make programs of thousands of instructions on 255
    registers, slow to build (``docs/decisions/0010-fewer-kernel-specializations.md``).
    """
    if INTERPRETED:
        return _interpreter_config(rows, channels, pairs)
    tuned = TUNED_CONFIGS.get((channels, pairs, element_size, heads, in_place))
    if tuned is not None and tuned.block_rows <= rows:
        return tuned
    copy_channels = min(triton.next_power_of_2(max(channels - 2 * pairs, 1)), 1024)
    rotary_channels = min(triton.next_power_of_2(2 * pairs), 1024)
    if in_place and heads == 1:  # only the rotary block moves, and every row has its own cos/sin: one pair a thread
        block_rows, num_warps = max(1, 2 * 32 * 4 // rotary_channels), 4
    elif in_place:
        block_rows, num_warps = max(1, 4096 // (rotary_channels * element_size)), 2
    else:
        block_rows, num_warps = max(1, 4096 // (max(copy_channels, rotary_channels) * element_size)), 2
    block_rows = min(block_rows, triton.next_power_of_2(max(rows, 1)))
    heads_power_of_two = heads & -heads  # the largest power of two dividing heads
    if heads_power_of_two >= 4:
        block_rows = min(block_rows, heads_power_of_two)
    frequency_rows = 1 if shares_frequencies(heads, block_rows) else block_rows
    while num_warps < 8 and frequency_rows * rotary_channels // 2 > 2 * 32 * num_warps:
        num_warps *= 2
    return LaunchConfig(block_rows, copy_channels, rotary_channels, num_warps)


def shares_frequencies(heads: int, block_rows: int) -> bool:
    """Whether a program's rows are heads of one position, and so share its cos/sin: rows per program divide the
    heads (the kernel's SHARED_FREQUENCIES)."""
    return heads % block_rows == 0


def _interpreter_config(rows: int, channels: int, pairs: int) -> LaunchConfig:
    """Under the interpreter every program and chunk costs Python time, so programs are as large as a tile allows:
    the copied part in one chunk (a whole chunk where it is a power of two, else a masked one), the rotary block in
    one, and as many rows as fit in 2**16 elements (at most ``ELEMENTS_PER_PROGRAM`` rows, the room ``MAX_ROWS``
    leaves); the CPU suite runs the shared-frequency path and programs of a few rows through explicit configurations."""
    # A CPU case's tensor (up to 24576 elements) is then one program: each costs nearly what a whole tensor does.
    interpreter_elements = 2**16
    copy_channels = min(triton.next_power_of_2(max(channels - 2 * pairs, 1)), 1024)
    rotary_channels = min(triton.next_power_of_2(2 * pairs), 1024)
    widest = max(copy_channels, rotary_channels)
    block_rows = min(interpreter_elements // widest, triton.next_power_of_2(rows), ELEMENTS_PER_PROGRAM)
    return LaunchConfig(max(block_rows, 1), copy_channels, rotary_channels, num_warps=4)
