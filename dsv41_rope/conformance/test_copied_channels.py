"""Copied channels: every channel before the rotary block is a bit copy, whatever its bits (NaN payloads too)."""

import pytest

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import SHAPES, Case, runs_here

# Every shape with copied channels, in every layout, dtype and direction (under the interpreter: its cover's).
COPY_CASES = [
    pytest.param(case, id=f"{case.id}-random-bits")
    for case in runs_here(
        [
            Case(dtype_name, shape_name, layout, inverse, "normal")
            for dtype_name in ("bf16", "fp16", "fp32")
            for shape_name, shape in SHAPES.items()
            if 2 * shape.pairs < shape.cpu[-1]
            for layout in shape.layouts
            for inverse in (False, True)
        ]
    )
]


@pytest.mark.parametrize("case", COPY_CASES)
def test_copied_channels_are_bit_copies(case, device, impl_under_test, ulp_drift):
    checks.copied_channels_are_copies(case, device, impl_under_test, ulp_drift)
