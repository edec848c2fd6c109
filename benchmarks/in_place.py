"""The in-place rotation (``apply_rope_triton_``) against its floors and its peer, on the DeepSeek V4.1 shapes.

Run as a section of ``python -m benchmarks.run``. Per shape, all timed in the same run with a cold L2 (host time
excluded; the rotary slice of the query is 32 MB and would stay in the H200's L2 across warm replays, which flatters
an in-place op), the in-place time over:

* a ``clone()`` of the whole tensor;
* the bytes floor: reading and writing the ``2P`` rotary channels of every row, ``2P/C`` of that copy;
* our out-of-place call;
* flash-attention's in-place rotary (``flash_attn/ops/triton/rotary.py``, interleaved pairs) on the same
  ``values[..., -2P:]`` slice, given cos/sin tables computed beforehand, where the file is available;
* and, over flash-attention's time, our in-place launch handed ``torch.polar``'s (cos, sin) table computed
  beforehand as flash-attention is handed its tables (``in_kernel_frequencies=False``): what our call would cost
  without computing cos/sin, the work our call does and flash-attention's timed call does not.

The row also counts the rotated elements where flash-attention's bits differ from ours (ours are eager's, which the
conformance suite proves), and gives both calls' host time. flash-attention is not a dependency: its rotary file is
read from ``$DSV41_FLASH_ROTARY`` or ``.peers/flash_attn_rotary.py`` (see docs/benchmarks.md), never committed.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from benchmarks.common import GraphTimer, short_error
from benchmarks.shapes import PAIRS, Case, make_angles, make_values

IN_PLACE_CASES = ("query", "index_query", "window_kv", "compressed_kv", "index_keys")
FLASH_ROTARY_PATHS = (os.environ.get("DSV41_FLASH_ROTARY", ""), ".peers/flash_attn_rotary.py")
IN_PLACE_HEADER = (
    f"{'in place':<15} {'dtype':<5} {'cold us':>8} {'x copy':>7} {'x floor':>7} {'x ours':>7} {'x flash':>7} "
    f"{'table/fl':>8} {'host us':>8} {'host oop':>8} {'flash differs':>13}"
)


def load_flash_attention_rotary() -> tuple[Callable[..., torch.Tensor] | None, str]:
    """flash-attention's ``apply_rotary``, imported from its file, and a note saying where from (or why not)."""
    for candidate in FLASH_ROTARY_PATHS:
        if candidate and Path(candidate).is_file():
            spec = importlib.util.spec_from_file_location("flash_attn_rotary_peer", candidate)
            module = importlib.util.module_from_spec(spec)
            try:
                spec.loader.exec_module(module)
            except Exception as error:  # a peer that fails to import leaves its column empty
                return None, f"{candidate}: {short_error(error)}"
            return module.apply_rotary, candidate
    return None, "flash-attention's rotary.py not found (DSV41_FLASH_ROTARY, .peers/flash_attn_rotary.py)"


def measure_in_place(
    case: Case, dtype: torch.dtype, rope: ModuleType, timer: GraphTimer, flash_rotary: Callable | None
) -> dict[str, Any]:
    """One row of the in-place section."""
    values = make_values(case, dtype)
    angles = make_angles(case.shape[1])
    channels = case.shape[-1]
    row: dict[str, Any] = {"case": case.name, "shape": list(case.shape), "dtype": str(dtype).removeprefix("torch.")}
    with torch.no_grad():
        rope.apply_rope_triton_(values.clone(), angles)  # compile and calibrate outside the timing
        out_of_place = lambda: rope.apply_rope_triton(values, angles)  # noqa: E731
        out_of_place()
        timings = {
            "copy": timer.time_copy(values.clone),
            "in_place": timer.time(lambda: rope.apply_rope_triton_(values, angles)),
            "out_of_place": timer.time(out_of_place),
        }
        if flash_rotary is not None:
            try:
                rotate = flash_in_place(flash_rotary, angles)
                flash = lambda: rotate(values)  # noqa: E731
                flash()
                timings["flash"] = timer.time(flash)
                row["flash_differs"] = _flash_differences(values, angles, rope, flash_rotary)
            except Exception as error:  # the peer's failure must not end the run
                row["flash_error"] = short_error(error)
        handed_table = _handed_table_call(rope, values, angles)
        if handed_table is not None:
            handed_table()
            timings["handed_table"] = timer.time(handed_table)
    floor_ms = timings["copy"].cold_ms * 2 * PAIRS / channels
    in_place = timings["in_place"]
    row.update(
        times_ms={name: timing.to_json() for name, timing in timings.items()},
        floor_cold_ms=floor_ms,
        ratio_to_copy=in_place.cold_ms / timings["copy"].cold_ms,
        ratio_to_floor=in_place.cold_ms / floor_ms,
        ratio_to_out_of_place=in_place.cold_ms / timings["out_of_place"].cold_ms,
        ratio_to_flash=in_place.cold_ms / timings["flash"].cold_ms if "flash" in timings else None,
        handed_table_to_flash=(
            timings["handed_table"].cold_ms / timings["flash"].cold_ms
            if "flash" in timings and "handed_table" in timings
            else None
        ),
    )
    row["target"] = {
        "target": "in place <= flash-attention in place (cold)",
        "value": row["ratio_to_flash"],
        "passed": None if row["ratio_to_flash"] is None else row["ratio_to_flash"] <= 1.0,
        "host_not_above_out_of_place": in_place.host_ms <= timings["out_of_place"].host_ms,
    }
    return row


def _handed_table_call(rope: ModuleType, values: torch.Tensor, angles: torch.Tensor) -> Callable[[], None] | None:
    """Our in-place launch of ``values`` handed ``torch.polar``'s (cos, sin) table of ``angles``, computed here,
    outside the timing (None for a kernel without that launch, or a device that runs the eager path)."""
    launch, settings = getattr(getattr(rope, "launch", None), "launch_kernel", None), getattr(rope, "settings", None)
    if launch is None or settings is None:
        return None
    chosen = settings(values.device)
    if chosen.contraction is None:
        return None
    table = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    handed = dataclasses.replace(chosen, in_kernel_frequencies=False)
    return lambda: launch(values, table, values, negate_sin=False, settings=handed)


def flash_in_place(
    flash_rotary: Callable[..., torch.Tensor], angles: torch.Tensor, *, conjugate: bool = False
) -> Callable[[torch.Tensor], torch.Tensor]:
    """flash-attention's in-place rotary as a call to time: it rotates a tensor's last ``2 * PAIRS`` channels
    (interleaved pairs) in place and returns the tensor. Handed float32 cos/sin tables ``[S, PAIRS]`` of ``angles``
    (``[1, S, PAIRS]``), computed here, outside the timing."""
    cos, sin = torch.cos(angles[0]), torch.sin(angles[0])

    def rotate(tensor: torch.Tensor) -> torch.Tensor:
        rotary = (tensor if tensor.dim() == 4 else tensor.unsqueeze(2))[..., -2 * PAIRS :]
        flash_rotary(rotary, cos, sin, interleaved=True, inplace=True, conjugate=conjugate)
        return tensor

    return rotate


def _flash_differences(values, angles, rope, flash_rotary) -> int:
    """Rotated elements where flash-attention's in-place result differs, in bits, from ours (eager's)."""
    ours, theirs = values.clone(), values.clone()
    rope.apply_rope_triton_(ours, angles)
    flash_in_place(flash_rotary, angles)(theirs)
    integer = torch.int16 if values.element_size() == 2 else torch.int32
    return int((ours.view(integer) != theirs.view(integer)).sum())


def format_in_place_row(row: dict[str, Any]) -> str:
    """One line of the in-place table."""
    times = row["times_ms"]

    def cell(value: float | None, spec: str) -> str:
        return "-" if value is None else format(value, spec)

    return (
        f"{row['case']:<15} {row['dtype'].replace('bfloat', 'bf').replace('float', 'fp'):<5} "
        f"{times['in_place']['cold'] * 1e3:>8.1f} {row['ratio_to_copy']:>7.3f} {row['ratio_to_floor']:>7.2f} "
        f"{row['ratio_to_out_of_place']:>7.3f} {cell(row['ratio_to_flash'], '7.3f')} "
        f"{cell(row.get('handed_table_to_flash'), '8.3f')} "
        f"{times['in_place']['host'] * 1e3:>8.1f} {times['out_of_place']['host'] * 1e3:>8.1f} "
        f"{cell(row.get('flash_differs'), '13d')}"
    )
