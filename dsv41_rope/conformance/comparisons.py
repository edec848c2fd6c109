"""The suite's comparisons and how they fail: bits against a reference, inputs left unwritten, the ulp-drift record
of a comparison, and the one-line message of a failure.

:func:`assert_bits` compares bit patterns with ``dsv41_rope.oracle.ulp.compare_bits``, records the comparison in the
ulp-drift report, and raises ``dsv41_rope.harness.failures.ConformanceFailure`` on a real mismatch or on a NaN-bit or
signed-zero difference its comparison does not allow. The message is one line, LLVM-libc-style: the case, the
comparison, and for each kind of difference that fails, how many elements differ of how many and the first of them
(coordinates, the input pair, the bits it got, the bits expected). Under Triton's interpreter, :func:`caveated` checks
add to a failure of another implementation in a dtype whose casts the interpreter gets wrong that it may be the
interpreter's (:func:`interpreter_caveat`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from dsv41_rope.conformance.cases import Case
from dsv41_rope.conformance.layouts import LayoutSpec
from dsv41_rope.conformance.references import EMULATED_CUDA
from dsv41_rope.harness import backend
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import Judged, judged
from dsv41_rope.oracle import ulp
from dsv41_rope.oracle.rounding import bits, unsigned_bits

__all__ = [
    "OVER_THE_BOUND",
    "assert_bits",
    "assert_unwritten",
    "caveated",
    "describe_distance",
    "describe_mismatch",
    "hex_of",
    "interpreter_caveat",
    "record",
    "unravel",
]

# How a failure names each kind of difference (`dsv41_rope.report.failed_tests.what_failed` reads them back).
MISMATCHES, NAN_BIT_DIFFERENCES, SIGNED_ZERO_DIFFERENCES = (
    "bit mismatches",
    "NaN bit-pattern differences",
    "signed-zero differences",
)
OVER_THE_BOUND = "norm-wise error over the bound"


def assert_unwritten(case_id: str, name: str, now: torch.Tensor, before: torch.Tensor) -> None:
    """Fail, naming the first element changed and its bits before and after, when ``now`` differs from ``before``."""
    changed = (bits(now) != bits(before)).reshape(-1)
    if not bool(changed.any()):
        return
    index = int(torch.nonzero(changed)[0])
    coordinates = unravel(index, tuple(now.shape))
    raise ConformanceFailure(
        f"{case_id} inputs-unwritten: the call wrote its {name}: {int(changed.sum())} of {now.numel()} elements "
        f"changed, first at {coordinates}: before {hex_of(before, coordinates)} after {hex_of(now, coordinates)}",
        what=f"inputs-unwritten: the {name} written",
    )


def record(
    ulp_drift, comparison: str, case: Case | LayoutSpec, device: torch.device, diffs: ulp.BitDifferences, **extra
) -> None:
    """Add one comparison to the ulp-drift report (no-op without the fixture, as in the gating-power test)."""
    if ulp_drift is None:
        return
    ulp_drift.record(
        comparison=comparison,
        dtype=case.dtype_name,
        backend=backend.name(),
        device=str(device),
        elements=diffs.elements,
        mismatches=diffs.mismatches,
        nan_bit_differences=diffs.nan_bit_differences,
        signed_zero_differences=diffs.signed_zero_differences,
        max_distance=min(diffs.max_distance, 2**62),
        **extra,
    )


def assert_bits(
    ulp_drift,
    comparison: str,
    case: Case | LayoutSpec,
    device: torch.device,
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    values: torch.Tensor | None = None,
    allow: tuple[str, ...] = (),
    held_to: str = "",
) -> ulp.BitDifferences:
    """Compare bits, record, and fail on a real mismatch or on a NaN-bit/signed-zero difference not in ``allow``.

    The comparison runs where the tensors are (the GPU for eager comparisons of full-size tensors). ``case`` is a
    fixed-matrix :class:`Case` or a generated :class:`LayoutSpec`: its ``id`` names it in the message, its
    ``dtype_name`` goes to the report. The message gives, for each kind of difference that fails, how many elements
    differ and the first one: coordinates, the input pair (``values``, when given), the bits got and expected; and,
    when ``held_to`` names it, the reference the expected bits come from
    (``dsv41_rope.conformance.references``)."""
    diffs = ulp.compare_bits(actual, expected)
    detail = describe_mismatch(diffs.first_mismatch_index, actual, expected, values) if diffs.mismatches else ""
    record(ulp_drift, comparison, case, device, diffs, allowed=",".join(allow), detail=detail)
    failing = []
    if diffs.mismatches:
        label = f"{MISMATCHES} ({describe_distance(diffs.max_distance)})"
        failing.append((diffs.mismatches, label, MISMATCHES, detail))
    for count, index, kind, allowed in (
        (diffs.nan_bit_differences, diffs.first_nan_bit_index, NAN_BIT_DIFFERENCES, "nan-bits"),
        (diffs.signed_zero_differences, diffs.first_signed_zero_index, SIGNED_ZERO_DIFFERENCES, "signed-zero"),
    ):
        if count and allowed not in allow:
            failing.append((count, kind, kind, describe_mismatch(index, actual, expected, values)))
    if failing:
        parts = [f"{count} {label} of {diffs.elements} elements, first {where}" for count, label, _, where in failing]
        raise ConformanceFailure(
            f"{case.id} {comparison}: " + "; ".join(parts) + (f"; held to {held_to}" if held_to else ""),
            what=f"{comparison}: {failing[0][2]}",
            held_to=held_to,
        )
    return diffs


def describe_distance(distance: int) -> str:
    """The largest distance of a comparison's mismatches, as a failure names it: ``max 3 ulp``, or, where a NaN meets
    a number (``dsv41_rope.oracle.ulp.INFINITE_DISTANCE``: no count of ulps joins them), ``a NaN against a number``."""
    if distance >= ulp.INFINITE_DISTANCE:
        return "among them a NaN against a number"
    return f"max {distance} ulp"


def describe_mismatch(
    index: int | None, actual: torch.Tensor, expected: torch.Tensor, values: torch.Tensor | None
) -> str:
    """Where a differing element is and the bits involved: ``at (0, 1, 0, 5): input <pair> got <bits> expected
    <bits>`` (the input pair when ``values`` is given)."""
    if index is None:
        return ""
    coordinates = unravel(index, tuple(actual.shape))
    text = f"at {coordinates}:"
    if values is not None:
        pair_start = coordinates[-1] - ((coordinates[-1] - actual.shape[-1]) % 2)
        pair = [coordinates[:-1] + (channel,) for channel in (pair_start, pair_start + 1) if channel < values.shape[-1]]
        text += " input " + ",".join(hex_of(values, c) for c in pair)
    return f"{text} got {hex_of(actual, coordinates)} expected {hex_of(expected, coordinates)}"


def unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The coordinates of a flat row-major index in ``shape``."""
    coordinates = []
    for size in reversed(shape):
        index, coordinate = divmod(index, size)
        coordinates.append(coordinate)
    return tuple(reversed(coordinates))


def hex_of(tensor: torch.Tensor, coordinates: tuple[int, ...]) -> str:
    """One element's bit pattern and value, as failure messages print them: ``0x3F80(1)``."""
    element = tensor.detach()[coordinates].cpu()
    pattern = int(unsigned_bits(element).item())
    return f"0x{pattern:0{2 * tensor.element_size()}X}({float(element):.9g})"


def interpreter_caveat(implementation: Judged, dtype_name: str, *, launched_triton: bool = False) -> str | None:
    """Why a failure of ``implementation`` in ``dtype_name`` may be Triton's interpreter rather than the
    implementation, or None: another implementation's Triton kernels, under an interpreter whose ``tl.fma`` rounds
    twice (``backend.interpreter_fma_problem``: any dtype) or whose casts are wrong in the dtype
    (``backend.interpreter_cast_problems``). The project's kernel computes its fma and its conversions exactly under
    any interpreter (float64 rounded to odd, integer bit operations), and a call that launched no Triton kernel (a
    plain PyTorch implementation) never meets the interpreter. ``launched_triton``: the failing call was seen
    launching one."""
    implementation = judged(implementation)
    if implementation.is_project_kernel or not (launched_triton or implementation.runs_triton_kernels):
        return None
    problems = [backend.interpreter_fma_problem(), backend.interpreter_cast_problems().get(dtype_name)]
    found = "; ".join(problem for problem in problems if problem)
    if not found:
        return None
    return f"may be Triton's interpreter, not {implementation.name}: {found}; judge {dtype_name} on a GPU"


def caveated(check: Callable[..., None]) -> Callable[..., None]:
    """Decorates a check ``check(case, device, implementation, ...)``: a :class:`ConformanceFailure` it raises says
    :func:`interpreter_caveat` of the case's dtype at the end of its message, where one applies (a failure held to
    eager CUDA's emulation on a CPU came from a call that launched a Triton kernel)."""

    @functools.wraps(check)
    def checked(case: Case | LayoutSpec, device: torch.device, implementation: Judged, *args, **kwargs) -> None:
        try:
            check(case, device, implementation, *args, **kwargs)
        except ConformanceFailure as failure:
            launched = failure.held_to == EMULATED_CUDA  # a CPU call that launched a Triton kernel
            caveat = interpreter_caveat(implementation, case.dtype_name, launched_triton=launched)
            if caveat:
                failure.args = (f"{failure.args[0]} [{caveat}]", *failure.args[1:])
            raise

    return checked
