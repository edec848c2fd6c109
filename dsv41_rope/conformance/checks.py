"""The checks behind the conformance suites, shared with the gating-power test that mutates the kernel.

Each check runs one case through the implementation under test (``harness.implementation``: the project's kernel,
another function with its contract, or a mutated copy of the kernel), compares bits against a reference, records the
comparison in the ulp-drift report when given the ``ulp_drift`` fixture, and raises ``ConformanceFailure`` (an
``AssertionError``) with a one-line, LLVM-libc-style message: the case, the comparison, how many elements differ, and
for each kind of difference the first element's coordinates, input bits, got and expected (``comparisons``). Under
Triton's interpreter, a failure of another implementation in a dtype whose casts the interpreter gets wrong says so.

The references never come from the implementation judged. The eager reference is the project's
``dsv41_rope.kernel.apply_rope_eager``, imported by that name (:func:`eager_reference`). The oracle emulates the
contraction variant of the *device's* eager multiply, as the project's calibration measures it
(:func:`contraction_of`), and is fed ``torch.polar``'s frequencies, or, when the project's kernel computes its own
cos/sin, those (:func:`kernel_frequencies_of`).

Difference policy. A real mismatch (any bit difference that is not only the sign of a zero or a NaN payload) always
fails. NaN-payload and signed-zero differences are counted apart and fail too, except where a comparison declares
them allowed: only the comparison with the eager *backward*, whose autograd adds zero-filled partial gradients, so
that ``-0 + 0 = +0`` and NaN payloads become the canonical NaN. The same two kinds are allowed between another
implementation's gradient and its own conjugate rotation, since an implementation may take its backward from autograd
(the eager reference does); the project's kernel, whose backward is the rotation itself, must match that bit for bit.
The report shows the allowed counts.

On a GPU the oracle and the float64 truth run on the CPU over a sample of positions (the first and last 32) of the
full-size tensors; the eager comparison covers every element. Under the interpreter every position is checked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from dsv41_rope.conformance.cases import Case, make_angles, make_values
from dsv41_rope.conformance.comparisons import (
    OVER_THE_BOUND,
    assert_bits,
    assert_unwritten,
    caveated,
    hex_of,
    unravel,
)
from dsv41_rope.harness import backend
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import Judged, judged
from dsv41_rope.oracle import eager as oracle_eager
from dsv41_rope.oracle import truth as oracle_truth
from dsv41_rope.oracle import ulp
from dsv41_rope.oracle.rounding import INTEGER_VIEW, bits

__all__ = [
    "AUTOGRAD_NORMALIZATION",
    "contraction_of",
    "copied_channels_are_copies",
    "describe_contraction",
    "eager_reference",
    "error_within_bound",
    "forward_matches_eager",
    "forward_matches_oracle",
    "gradient_is_conjugate_rotation",
    "in_place_matches",
    "kernel_frequencies_of",
    "on_cpu",
    "oracle_matches_eager",
    "positions",
    "raised_by",
    "rejects_what_eager_rejects",
]

_SAMPLED_POSITIONS = 32
# Norm-wise error bound vs the float64 truth, in ulps of the pair magnitude in the output dtype. Derivation
# (docs/conformance.md): the final rounding costs at most 0.5 ulp; everything before it happens in float32 with
# cos/sin within 2 float32 ulps (torch.polar on CUDA and glibc), one rounded product and one fma, at most
# (2 sqrt(2) + 2) * 2**-24 * |pair| together; a part contracted "none" rounds both products and adds, one rounding
# more. That is <= 0.004 ulp of BF16/FP16, and below 5 (6 with a "none" part) float32 ulps.
_NORMWISE_BOUND = {"bf16": 0.504, "fp16": 0.504, "fp32": 5.0}
_NORMWISE_BOUND_FP32_UNFUSED = 6.0
# Where the gradient is also computed for other values: a backward that read the forward's values would differ on
# normal values, and on special ones its NaNs and infinities would spread; the other regimes add only CPU time.
_VALUE_INDEPENDENCE_REGIMES = ("normal", "special")
# The differences autograd's accumulation of zero-filled partial gradients makes: allowed against eager backwards.
AUTOGRAD_NORMALIZATION = ("signed-zero", "nan-bits")


@dataclasses.dataclass
class _ForwardRun:
    """One forward call of the implementation under test on a case's inputs."""

    values: torch.Tensor
    angles: torch.Tensor
    output: torch.Tensor


def eager_reference(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The eager reference: Automodel's ``_apply_rope`` step for step, as the project keeps it in
    ``dsv41_rope.kernel.apply_rope_eager``.

    Imported by that name whatever is judged, so an implementation is never its own reference. It is the project
    kernel's one copy of the formula (its fallback path, and what the GPU runs prove equal to the oracle), rather than a
    second copy here that could drift from it; the kernel package stays standalone."""
    from dsv41_rope.kernel import apply_rope_eager

    return apply_rope_eager(values, angles, inverse=inverse)


def _run_forward(case: Case, device: torch.device, implementation: Judged) -> _ForwardRun:
    """Call the implementation on the case's inputs and check that the inputs were left untouched."""
    values = make_values(case, device)
    angles = make_angles(case, device)
    values_before, angles_before = values.clone(), angles.clone()
    output = judged(implementation).forward(values, angles, case.inverse)
    assert_unwritten(case.id, "values", values, values_before)
    assert_unwritten(case.id, "angles", angles, angles_before)
    return _ForwardRun(values, angles, output)


def _frequencies_of(angles: torch.Tensor) -> torch.Tensor:
    """The frequencies exactly as the eager path computes them, on the angles' device."""
    return torch.polar(torch.ones_like(angles), angles)


def kernel_frequencies_of(angles: torch.Tensor, implementation: Judged) -> torch.Tensor:
    """The frequencies the implementation multiplies by, as complex64 on the angles' device: torch.polar's, as the
    eager path computes them (on a GPU the project kernel's own cos/sin equal them for every float32 angle, which
    ``test_frequencies.py`` proves), except for the project's kernel under the interpreter when its in-kernel path is
    forced, whose cos/sin are numpy's (``sin x = x`` for subnormal x)."""
    kernel = judged(implementation).kernel
    if kernel is None:
        return _frequencies_of(angles)
    settings = kernel.settings(angles.device)
    if not (settings.in_kernel_frequencies and angles.device.type == "cpu"):
        return _frequencies_of(angles)
    array = angles.detach().contiguous().numpy()
    subnormal = (np.abs(array) < np.finfo(np.float32).tiny) | (array == 0)
    with np.errstate(all="ignore"):
        cos, sin = np.cos(array), np.where(subnormal, array, np.sin(array))
    return torch.complex(torch.from_numpy(cos), torch.from_numpy(sin))


def contraction_of(device: torch.device) -> tuple[str, str]:
    """The contraction variant of ``device``'s eager complex multiply, which the oracle emulates: the project's
    calibration measures it (``dsv41_rope.kernel.settings``; the H200's under the interpreter, or the variant that
    ``DSV41_ROPE_CONTRACTION`` forces), whichever implementation is judged."""
    from dsv41_rope import kernel

    contraction = kernel.settings(device).contraction
    assert contraction is not None, f"{device}: its eager multiply matches no contraction variant the oracle emulates"
    return contraction


def describe_contraction(device: torch.device) -> str:
    """The device's contraction variant and where it came from, for the report's metadata."""
    from dsv41_rope import kernel

    settings = kernel.settings(device)
    variant = "/".join(settings.contraction) if settings.contraction else "none (matches no variant)"
    return f"{variant} ({settings.source}); the oracle is fed torch.polar's frequencies"


def positions(sequence: int, device: torch.device) -> torch.Tensor | None:
    """Positions checked against the CPU references: all under the interpreter, first and last 32 on a GPU."""
    if device.type == "cpu" or sequence <= 2 * _SAMPLED_POSITIONS:
        return None
    return torch.cat([torch.arange(_SAMPLED_POSITIONS), torch.arange(sequence - _SAMPLED_POSITIONS, sequence)])


def on_cpu(tensor: torch.Tensor, chosen: torch.Tensor | None) -> torch.Tensor:
    """``tensor`` restricted to the chosen positions (dimension 1, unless broadcast there), on the CPU."""
    if chosen is not None and tensor.shape[1] > 1:
        tensor = tensor.index_select(1, chosen.to(tensor.device))
    return tensor.detach().cpu()


@caveated
def forward_matches_oracle(
    case: Case, device: torch.device, implementation: Judged, ulp_drift=None, *, prefix: str = ""
) -> None:
    """The forward equals the oracle's reproduction of CUDA eager in the device's contraction variant, fed the
    frequencies the implementation uses."""
    run = _run_forward(case, device, implementation)
    chosen = positions(run.values.shape[1], device)
    values = on_cpu(run.values, chosen)
    frequencies = on_cpu(kernel_frequencies_of(run.angles, implementation), chosen)
    expected = oracle_eager.apply_rope(values, frequencies, inverse=case.inverse, contraction=contraction_of(device))
    output = on_cpu(run.output, chosen)
    assert_bits(ulp_drift, f"{prefix}fused-vs-oracle", case, device, output, expected, values=values)


@caveated
def forward_matches_eager(
    case: Case, device: torch.device, implementation: Judged, ulp_drift=None, *, prefix: str = ""
) -> None:
    """The forward equals PyTorch's eager path on the same device, every element."""
    run = _run_forward(case, device, implementation)
    expected = eager_reference(run.values, run.angles, case.inverse)
    assert_bits(ulp_drift, f"{prefix}fused-vs-eager", case, device, run.output, expected, values=run.values)


def _values_with_random_leading_bits(case: Case, device: torch.device) -> torch.Tensor:
    """The case's values with random bit patterns (NaN payloads and signalling NaNs among them) in every channel
    before the rotary block."""
    values = make_values(case, device)
    leading = values.shape[-1] - 2 * case.shape.pairs
    generator = torch.Generator(device=device).manual_seed(case.seed + 3)
    integer = INTEGER_VIEW[case.dtype]
    limit = 2 ** (8 * values.element_size() - 1)
    random_bits = torch.randint(-limit, limit, values.shape, generator=generator, device=device, dtype=torch.int64)
    values.view(integer)[..., :leading] = random_bits[..., :leading].to(integer)
    return values


@caveated
def copied_channels_are_copies(case: Case, device: torch.device, implementation: Judged, ulp_drift=None) -> None:
    """Channels before the rotary block are bit copies, NaN payloads and signalling NaNs included."""
    values = _values_with_random_leading_bits(case, device)
    leading = values.shape[-1] - 2 * case.shape.pairs
    output = judged(implementation).forward(values, make_angles(case, device), case.inverse)
    assert_bits(ulp_drift, "copied-vs-input", case, device, output[..., :leading], values[..., :leading])


@caveated
def in_place_matches(case: Case, device: torch.device, implementation: Judged, ulp_drift=None) -> None:
    """The in-place function returns ``values`` itself with the out-of-place function's bits in the rotary channels
    (the oracle's, and eager's on a GPU) and every channel before them untouched, whatever its bits."""
    implementation = judged(implementation)
    values = _values_with_random_leading_bits(case, device)
    angles = make_angles(case, device)
    before, angles_before = values.clone(), angles.clone()
    leading = values.shape[-1] - 2 * case.shape.pairs
    out_of_place = implementation.forward(before, angles, case.inverse)
    result = implementation.in_place(values, angles, inverse=case.inverse)
    assert result is values, f"{case.id}: {implementation.in_place_name} returned a new tensor, not values"
    assert torch.equal(bits(angles), bits(angles_before)), f"{case.id}: the in-place op wrote its angles"
    rotated, before_rotary = values[..., leading:], before[..., leading:]
    assert_bits(
        ulp_drift, "in-place-vs-out-of-place", case, device, rotated, out_of_place[..., leading:], values=before_rotary
    )
    assert_bits(ulp_drift, "in-place-untouched-channels", case, device, values[..., :leading], before[..., :leading])
    chosen = positions(values.shape[1], device)
    expected = oracle_eager.apply_rope(
        on_cpu(before, chosen),
        on_cpu(kernel_frequencies_of(angles, implementation), chosen),
        inverse=case.inverse,
        contraction=contraction_of(device),
    )[..., leading:]
    assert_bits(ulp_drift, "in-place-vs-oracle", case, device, on_cpu(rotated, chosen), expected)
    if device.type == "cuda":
        eager = eager_reference(before, angles, case.inverse)[..., leading:]
        assert_bits(ulp_drift, "in-place-vs-eager", case, device, rotated, eager, values=before_rotary)


@caveated
def gradient_is_conjugate_rotation(
    case: Case,
    device: torch.device,
    implementation: Judged,
    ulp_drift=None,
    *,
    prefix: str = "",
    compare_eager: bool = True,
) -> None:
    """The autograd gradient for upstream g is the forward on g with the opposite ``inverse`` (bit for bit for the
    project's kernel; up to autograd's zero/NaN normalization for another implementation, see the module docstring);
    it equals the oracle backward (and the eager backward on a GPU, unless ``compare_eager`` is off because a
    contraction variant the device's eager path does not use is forced) up to that normalization; and it does not
    depend on the values. ``prefix`` starts every comparison's label."""
    implementation = judged(implementation)
    values = make_values(case, device)
    angles = make_angles(case, device)
    grad_output = make_values(case, device, salt=1)
    leaf = values.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(implementation.forward(leaf, angles, case.inverse), leaf, grad_output)
    rotated_back = implementation.forward(grad_output, angles, not case.inverse)
    comparison = f"{prefix}backward-vs-conjugate"
    allow = () if implementation.is_project_kernel else AUTOGRAD_NORMALIZATION
    assert_bits(ulp_drift, comparison, case, device, gradient, rotated_back, values=grad_output, allow=allow)

    if case.regime in _VALUE_INDEPENDENCE_REGIMES:
        other_leaf = make_values(case, device, salt=2).detach().requires_grad_(True)
        other_output = implementation.forward(other_leaf, angles, case.inverse)
        (other,) = torch.autograd.grad(other_output, other_leaf, grad_output)
        assert_bits(ulp_drift, f"{prefix}backward-independent-of-values", case, device, other, gradient)

    chosen = positions(values.shape[1], device)
    upstream = on_cpu(grad_output, chosen)
    expected = oracle_eager.apply_rope_backward(
        upstream,
        on_cpu(kernel_frequencies_of(angles, implementation), chosen),
        inverse=case.inverse,
        contraction=contraction_of(device),
    )
    gradient_sample = on_cpu(gradient, chosen)
    comparison = f"{prefix}backward-vs-oracle"
    allow = AUTOGRAD_NORMALIZATION
    assert_bits(ulp_drift, comparison, case, device, gradient_sample, expected, values=upstream, allow=allow)
    if device.type == "cuda" and compare_eager:
        eager_leaf = values.detach().requires_grad_(True)
        (eager,) = torch.autograd.grad(eager_reference(eager_leaf, angles, case.inverse), eager_leaf, grad_output)
        comparison = f"{prefix}backward-vs-eager"
        assert_bits(ulp_drift, comparison, case, device, gradient, eager, values=grad_output, allow=allow)


@caveated
def error_within_bound(
    case: Case, device: torch.device, implementation: Judged, ulp_drift=None, *, prefix: str = ""
) -> None:
    """Error against the float64 truth: norm-wise within ``_NORMWISE_BOUND``; elementwise reported, not bounded
    (it is unbounded near cancellation, when a rotated value is close to 0 while its pair is not)."""
    run = _run_forward(case, device, implementation)
    chosen = positions(run.values.shape[1], device)
    pairs = case.shape.pairs
    truth = oracle_truth.apply_rope(on_cpu(run.values, chosen), on_cpu(run.angles, chosen), inverse=case.inverse)
    rotated, rotated_truth = on_cpu(run.output, chosen)[..., -2 * pairs :], truth[..., -2 * pairs :]
    elementwise = ulp.summarize(ulp.error(rotated, rotated_truth))
    normwise_errors = ulp.normwise_error(rotated, rotated_truth)
    normwise = ulp.summarize(normwise_errors)
    bound = _NORMWISE_BOUND[case.dtype_name]
    if case.dtype_name == "fp32" and "none" in contraction_of(device):
        bound = _NORMWISE_BOUND_FP32_UNFUSED
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


def oracle_matches_eager(case: Case, device: torch.device, ulp_drift=None) -> None:
    """The oracle's GPU proof: fed the device's ``torch.polar`` frequencies and its calibrated contraction, it gives
    eager CUDA's forward and autograd backward bits, NaN payloads and signed zeros included, on the sampled
    positions. Independent of any implementation judged: it tests the oracle the CPU suite stands on."""
    values, angles = make_values(case, device), make_angles(case, device)
    grad_output = make_values(case, device, salt=1)
    leaf = values.detach().requires_grad_(True)
    eager = eager_reference(leaf, angles, case.inverse)
    (eager_gradient,) = torch.autograd.grad(eager, leaf, grad_output)
    chosen = positions(values.shape[1], device)
    frequencies = on_cpu(_frequencies_of(angles), chosen)
    contraction = contraction_of(device)
    cpu_values = on_cpu(values, chosen)
    expected = oracle_eager.apply_rope(cpu_values, frequencies, inverse=case.inverse, contraction=contraction)
    assert_bits(ulp_drift, "oracle-vs-eager", case, device, expected, on_cpu(eager, chosen), values=cpu_values)
    upstream = on_cpu(grad_output, chosen)
    expected = oracle_eager.apply_rope_backward(upstream, frequencies, inverse=case.inverse, contraction=contraction)
    gradient = on_cpu(eager_gradient, chosen)
    assert_bits(ulp_drift, "oracle-backward-vs-eager", case, device, expected, gradient, values=upstream)


def raised_by(function: Callable[..., Any], *args: Any) -> Exception | None:
    """What ``function(*args)`` raised, or None."""
    try:
        function(*args)
    except Exception as error:  # any exception: only the project kernel's types and words are specified
        return error
    return None


def rejects_what_eager_rejects(
    implementation: Judged, values: Any, angles: Any, inverse: Any, *, eager_rejects: bool = True
) -> None:
    """Another implementation's answer to a bad input: some exception where the eager reference rejects it (the
    message says what eager raised), any answer where eager computes something by accident. A ``TypeError`` that says
    the function cannot be called as ``fn(values, angles, inverse=...)`` at all rejects nothing
    (:meth:`Implementation.calling_convention_error`)."""
    implementation = judged(implementation)
    unusable = implementation.calling_convention_error(values, angles, inverse)
    if unusable is not None:
        raise ConformanceFailure(
            f"{implementation.name} cannot be called as the suite calls it: {unusable}",
            what="bad input: cannot be called as fn(values, angles, inverse=...)",
        )
    if raised_by(implementation.forward, values, angles, inverse) is None and eager_rejects:
        eager = raised_by(eager_reference, values, angles, inverse)
        raise ConformanceFailure(
            f"{implementation.name} accepted an input eager rejects (eager raised {type(eager).__name__}: {eager})",
            what="bad input: accepted an input eager rejects",
        )
