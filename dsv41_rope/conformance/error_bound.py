"""The error bound against the float64 truth: the norm-wise error of the rotated channels within a bound per dtype
and reference, the elementwise error reported (``test_error_vs_truth.py``; derivation in docs/conformance.md)."""

from __future__ import annotations

import torch

from dsv41_rope.conformance import references
from dsv41_rope.conformance.cases import Case
from dsv41_rope.conformance.checks import contraction_of, on_cpu, positions, run_forward
from dsv41_rope.conformance.comparisons import OVER_THE_BOUND, caveated, hex_of, unravel
from dsv41_rope.harness import backend
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import Judged
from dsv41_rope.oracle import truth as oracle_truth
from dsv41_rope.oracle import ulp

__all__ = ["error_within_bound", "normwise_bound"]

# Norm-wise error bound vs the float64 truth, in ulps of the pair magnitude in the output dtype. Derivation
# (docs/conformance.md): the final rounding costs at most 0.5 ulp; everything before it happens in float32 with
# cos/sin within 2 float32 ulps (torch.polar on CUDA and glibc), one rounded product and one fma, at most
# (2 sqrt(2) + 2) * 2**-24 * |pair| together; a part contracted "none" rounds both products and adds, one rounding
# more. That is <= 0.004 ulp of BF16/FP16, and below 5 (6 with a "none" part) float32 ulps.
_NORMWISE_BOUND = {"bf16": 0.504, "fp16": 0.504, "fp32": 5.0}
_NORMWISE_BOUND_FP32_UNFUSED = 6.0


def normwise_bound(dtype_name: str, reference: references.Reference) -> float:
    """The norm-wise bound, in ulps, of a computation held to ``reference``: FP32's depends on the contraction of the
    eager multiply it reproduces (the device's, as calibrated); a CPU's eager multiply is no one variant (its
    vectorized body and its tail round differently), so the bound of the loosest variant, a part contracted
    ``none``, applies to it."""
    if dtype_name != "fp32":
        return _NORMWISE_BOUND[dtype_name]
    if reference.name == references.CPU_EAGER or "none" in contraction_of(reference.device):
        return _NORMWISE_BOUND_FP32_UNFUSED
    return _NORMWISE_BOUND[dtype_name]


@caveated
def error_within_bound(
    case: Case, device: torch.device, implementation: Judged, ulp_drift=None, *, prefix: str = ""
) -> None:
    """Error against the float64 truth: norm-wise within :func:`normwise_bound`; elementwise reported, not bounded
    (it is unbounded near cancellation, when a rotated value is close to 0 while its pair is not)."""
    run = run_forward(case, device, implementation, ulp_drift)
    chosen = positions(run.values.shape[1], device)
    pairs = case.shape.pairs
    truth = oracle_truth.apply_rope(on_cpu(run.values, chosen), on_cpu(run.angles, chosen), inverse=case.inverse)
    rotated, rotated_truth = on_cpu(run.output, chosen)[..., -2 * pairs :], truth[..., -2 * pairs :]
    elementwise = ulp.summarize(ulp.error(rotated, rotated_truth))
    normwise_errors = ulp.normwise_error(rotated, rotated_truth)
    normwise = ulp.summarize(normwise_errors)
    bound = normwise_bound(case.dtype_name, run.reference)
    if ulp_drift is not None:
        ulp_drift.record(
            comparison=f"{prefix}fused-vs-truth",
            dtype=case.dtype_name,
            backend=backend.name(),
            device=str(device),
            elements=rotated.numel(),
            mismatches=0,
            elementwise=elementwise,
            normwise=normwise,
            detail=f"norm-wise bound {bound} ulp",
        )
    if normwise["max"] > bound:
        flat_errors = torch.as_tensor(normwise_errors).reshape(-1)
        coordinates = unravel(int(flat_errors.argmax()), tuple(rotated.shape))
        rotary_input, angles = on_cpu(run.values, chosen)[..., -2 * pairs :], on_cpu(run.angles, chosen)
        first = coordinates[-1] - coordinates[-1] % 2
        pair = ",".join(hex_of(rotary_input, coordinates[:-1] + (channel,)) for channel in (first, first + 1))
        angle = angles[min(coordinates[0], angles.shape[0] - 1), coordinates[1], first // 2]
        raise ConformanceFailure(
            f"{case.id} {prefix}fused-vs-truth: norm-wise error {normwise['max']:.4g} ulp > bound {bound} in "
            f"{int((flat_errors > bound).sum())} of {flat_errors.numel()} elements, worst at {coordinates}: input "
            f"{pair} angle {float(angle):.9g} got {hex_of(rotated, coordinates)} truth "
            f"{float(rotated_truth[coordinates]):.17g}",
            what=OVER_THE_BOUND,
        )
