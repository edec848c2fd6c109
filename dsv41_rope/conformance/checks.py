"""The checks behind the conformance suites, shared with the gating-power test that mutates the kernel.

Each check runs one case through the implementation under test (``harness.implementation``: the project's kernel,
another function with its contract, or a mutated copy of the kernel), compares bits against the reference the
computation is held to (``references``: on a GPU its eager path; on a CPU eager CUDA's bits as the oracle emulates
them for a call that ran a Triton kernel, else the CPU's own eager path), records the comparison in the ulp-drift
report when given the ``ulp_drift`` fixture, and raises ``ConformanceFailure`` (an ``AssertionError``) with a
one-line, LLVM-libc-style message: the case, the comparison, how many elements differ, for each kind of difference
the first element's coordinates, input bits, got and expected (``comparisons``), and the reference. Under Triton's
interpreter, a failure of another implementation in a dtype whose casts the interpreter gets wrong says so.

The references never come from the implementation judged. The eager reference is the project's
``dsv41_rope.kernel.apply_rope_eager``, imported by that name (:func:`eager_reference`). The oracle emulates the
contraction variant of the *device's* eager multiply, as the project's calibration measures it
(:func:`contraction_of`), and is fed ``torch.polar``'s frequencies, or, when the project's kernel computes its own
cos/sin, those (:func:`kernel_frequencies_of`); it emulates float32 angles, which is all eager CUDA's float32
multiply takes (float64 angles make eager compute in complex128, which only the device itself can show).

Difference policy. A real mismatch (any bit difference that is not only the sign of a zero or a NaN payload) always
fails. NaN-payload and signed-zero differences are counted apart and fail too, except where a comparison declares
them allowed: only the comparison with the eager *backward*, whose autograd adds zero-filled partial gradients, so
that ``-0 + 0 = +0`` and NaN payloads become the canonical NaN. The same two kinds are allowed between another
implementation's gradient and its own conjugate rotation, since an implementation may take its backward from autograd
(the eager reference does); the project's kernel, whose backward is the rotation itself, must match that bit for bit.
The report shows the allowed counts.

On a GPU the oracle runs on the CPU over the first and last 32 positions; eager covers every element.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from dsv41_rope.conformance import references
from dsv41_rope.conformance.cases import Case, make_angles, make_values
from dsv41_rope.conformance.comparisons import assert_bits, assert_unwritten, caveated
from dsv41_rope.harness.implementation import Judged, judged
from dsv41_rope.oracle import eager as oracle_eager
from dsv41_rope.oracle.rounding import INTEGER_VIEW, bits

__all__ = [
    "AUTOGRAD_NORMALIZATION",
    "contraction_of",
    "copied_channels_are_copies",
    "describe_contraction",
    "eager_reference",
    "forward_matches_eager",
    "forward_matches_reference",
    "gradient_is_conjugate_rotation",
    "held_call",
    "in_place_matches",
    "kernel_frequencies_of",
    "on_cpu",
    "oracle_applies",
    "oracle_matches_eager",
    "positions",
    "run_forward",
    "ForwardRun",
]

_SAMPLED_POSITIONS = 32
# Where the gradient is also computed for other values: a backward that read the forward's values would differ on
# normal values, and on special ones its NaNs and infinities would spread; the other regimes add only CPU time.
_VALUE_INDEPENDENCE_REGIMES = ("normal", "special")
# The differences autograd's accumulation of zero-filled partial gradients makes: allowed against eager backwards.
AUTOGRAD_NORMALIZATION = ("signed-zero", "nan-bits")


@dataclasses.dataclass
class ForwardRun:
    """One forward call of the implementation on a case's inputs, and the reference it is held to."""

    values: torch.Tensor
    angles: torch.Tensor
    output: torch.Tensor
    reference: references.Reference


def eager_reference(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The eager reference: Automodel's ``_apply_rope`` step for step, as the project keeps it in
    ``dsv41_rope.kernel.apply_rope_eager``.

    Imported by that name whatever is judged, so an implementation is never its own reference. It is the project
    kernel's one copy of the formula (its fallback path, and what the GPU runs prove equal to the oracle), rather than a
    second copy here that could drift from it; the kernel package stays standalone."""
    from dsv41_rope.kernel import apply_rope_eager

    return apply_rope_eager(values, angles, inverse=inverse)


def held_call(
    device: torch.device, implementation: Judged, call: Callable[[], Any], ulp_drift=None
) -> tuple[Any, references.Reference]:
    """Runs ``call`` (a call of the implementation on ``device``) and returns its result and the reference it is held
    to, decided from whether it launched a Triton kernel (``references.held_to``); records that reference. On a GPU
    the reference is its eager path whatever runs, so the call is not watched there."""
    if device.type == "cuda":
        result, launched = call(), False
    else:
        with references.watch_triton_launches() as launches:
            result = call()
        launched = launches.launched
    reference = references.held_to(device, implementation, launched)
    references.note(ulp_drift, reference, implementation)
    return result, reference


def run_forward(case: Case, device: torch.device, implementation: Judged, ulp_drift=None) -> ForwardRun:
    """Call the implementation on the case's inputs and check that the inputs were left untouched."""
    values = make_values(case, device)
    angles = make_angles(case, device)
    values_before, angles_before = values.clone(), angles.detach().clone()
    output, reference = held_call(
        device, implementation, lambda: judged(implementation).forward(values, angles, case.inverse), ulp_drift
    )
    assert_unwritten(case.id, "values", values, values_before)
    assert_unwritten(case.id, "angles", angles.detach(), angles_before)
    return ForwardRun(values, angles, output, reference)


def oracle_applies(angles: torch.Tensor) -> bool:
    """Whether the oracle emulates eager CUDA for these angles: float32 ones (not float64: complex128 in eager)."""
    return angles.dtype == torch.float32


def _skip_unemulated(reference: references.Reference, angles: torch.Tensor) -> None:
    """Skips, saying why, where the reference is eager CUDA's emulation and the oracle cannot emulate it."""
    if reference.emulated and not oracle_applies(angles):
        pytest.skip(
            f"{str(angles.dtype).removeprefix('torch.')} angles: eager CUDA computes them in complex128, which the "
            "oracle does not emulate on a CPU; this call ran a Triton kernel, so it is judged on a GPU"
        )


def _frequencies_of(angles: torch.Tensor) -> torch.Tensor:
    """The frequencies exactly as the eager path computes them, on the angles' device."""
    return torch.polar(torch.ones_like(angles), angles)


def kernel_frequencies_of(angles: torch.Tensor, implementation: Judged) -> torch.Tensor:
    """The frequencies the implementation multiplies by, as complex64 on the angles' device: torch.polar's (on a GPU
    the project kernel's own cos/sin equal them for every float32 angle: ``test_frequencies.py``), except for the
    project's kernel under the interpreter with its in-kernel path forced: numpy's (``sin x = x`` for subnormal x)."""
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
def forward_matches_reference(
    case: Case,
    device: torch.device,
    implementation: Judged,
    ulp_drift=None,
    *,
    prefix: str = "",
    eager_on_gpu: bool = True,
) -> None:
    """The forward equals its reference (``references``): the oracle's reproduction of eager CUDA in the device's
    contraction variant, fed the frequencies the implementation uses, where it applies (a GPU, sampled; a CPU call
    that ran Triton code); the device's own eager path, every element, where that is the reference (a CPU call that
    ran PyTorch code) and, with ``eager_on_gpu``, on a GPU."""
    run = run_forward(case, device, implementation, ulp_drift)
    _skip_unemulated(run.reference, run.angles)
    held_to = run.reference.name
    compared = False
    if run.reference.uses_oracle and oracle_applies(run.angles):
        chosen = positions(run.values.shape[1], device)
        values = on_cpu(run.values, chosen)
        frequencies = on_cpu(kernel_frequencies_of(run.angles, implementation), chosen)
        expected = oracle_eager.apply_rope(
            values, frequencies, inverse=case.inverse, contraction=contraction_of(device)
        )
        output = on_cpu(run.output, chosen)
        label = f"{prefix}fused-vs-oracle"
        assert_bits(ulp_drift, label, case, device, output, expected, values=values, held_to=held_to)
        compared = True
    if run.reference.eager_on_device and (device.type == "cpu" or eager_on_gpu or not compared):
        expected = eager_reference(run.values, run.angles, case.inverse)
        label = f"{prefix}fused-vs-eager"
        assert_bits(ulp_drift, label, case, device, run.output, expected, values=run.values, held_to=held_to)


@caveated
def forward_matches_eager(
    case: Case, device: torch.device, implementation: Judged, ulp_drift=None, *, prefix: str = ""
) -> None:
    """The forward equals PyTorch's eager path on the same device, every element."""
    run = run_forward(case, device, implementation)
    expected = eager_reference(run.values, run.angles, case.inverse)
    label = f"{prefix}fused-vs-eager"
    assert_bits(ulp_drift, label, case, device, run.output, expected, values=run.values, held_to=run.reference.name)


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
    (and its reference's: the oracle's where it applies, the device's eager path's where that is the reference or on
    a GPU) and every channel before them untouched, whatever its bits."""
    implementation = judged(implementation)
    values = _values_with_random_leading_bits(case, device)
    angles = make_angles(case, device)
    before, angles_before = values.clone(), angles.detach().clone()
    leading = values.shape[-1] - 2 * case.shape.pairs
    out_of_place = implementation.forward(before, angles, case.inverse)
    result, reference = held_call(
        device, implementation, lambda: implementation.in_place(values, angles, inverse=case.inverse), ulp_drift
    )
    assert result is values, f"{case.id}: {implementation.in_place_name} returned a new tensor, not values"
    assert torch.equal(bits(angles), bits(angles_before)), f"{case.id}: the in-place op wrote its angles"
    _skip_unemulated(reference, angles)
    rotated, before_rotary = values[..., leading:], before[..., leading:]
    assert_bits(
        ulp_drift, "in-place-vs-out-of-place", case, device, rotated, out_of_place[..., leading:], values=before_rotary
    )
    assert_bits(ulp_drift, "in-place-untouched-channels", case, device, values[..., :leading], before[..., :leading])
    if reference.uses_oracle and oracle_applies(angles):
        chosen = positions(values.shape[1], device)
        expected = oracle_eager.apply_rope(
            on_cpu(before, chosen),
            on_cpu(kernel_frequencies_of(angles, implementation), chosen),
            inverse=case.inverse,
            contraction=contraction_of(device),
        )[..., leading:]
        label = "in-place-vs-oracle"
        assert_bits(ulp_drift, label, case, device, on_cpu(rotated, chosen), expected, held_to=reference.name)
    if reference.eager_on_device:
        eager = eager_reference(before, angles, case.inverse)[..., leading:]
        label = "in-place-vs-eager"
        assert_bits(ulp_drift, label, case, device, rotated, eager, values=before_rotary, held_to=reference.name)


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
    it does not depend on the values; and it equals its reference's backward up to that normalization: the oracle's
    where it applies, the device's eager path's where that is the reference, and on a GPU (unless ``compare_eager``
    is off because a contraction variant the device's eager path does not use is forced). ``prefix`` starts every
    comparison's label."""
    implementation = judged(implementation)
    values = make_values(case, device)
    angles = make_angles(case, device)
    grad_output = make_values(case, device, salt=1)
    leaf = values.detach().requires_grad_(True)

    def backward() -> torch.Tensor:
        output = implementation.forward(leaf, angles, case.inverse)
        return torch.autograd.grad(output, leaf, grad_output)[0]

    gradient, reference = held_call(device, implementation, backward, ulp_drift)
    _skip_unemulated(reference, angles)
    rotated_back = implementation.forward(grad_output, angles, not case.inverse)
    comparison = f"{prefix}backward-vs-conjugate"
    allow = () if implementation.is_project_kernel else AUTOGRAD_NORMALIZATION
    assert_bits(ulp_drift, comparison, case, device, gradient, rotated_back, values=grad_output, allow=allow)

    if case.regime in _VALUE_INDEPENDENCE_REGIMES:
        other_leaf = make_values(case, device, salt=2).detach().requires_grad_(True)
        other_output = implementation.forward(other_leaf, angles, case.inverse)
        (other,) = torch.autograd.grad(other_output, other_leaf, grad_output)
        assert_bits(ulp_drift, f"{prefix}backward-independent-of-values", case, device, other, gradient)

    allow = AUTOGRAD_NORMALIZATION
    if reference.uses_oracle and oracle_applies(angles):
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
        assert_bits(
            ulp_drift,
            comparison,
            case,
            device,
            gradient_sample,
            expected,
            values=upstream,
            allow=allow,
            held_to=reference.name,
        )
    if reference.eager_on_device and (device.type == "cpu" or compare_eager):
        eager_leaf = values.detach().requires_grad_(True)
        (eager,) = torch.autograd.grad(eager_reference(eager_leaf, angles, case.inverse), eager_leaf, grad_output)
        comparison = f"{prefix}backward-vs-eager"
        assert_bits(
            ulp_drift,
            comparison,
            case,
            device,
            gradient,
            eager,
            values=grad_output,
            allow=allow,
            held_to=reference.name,
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
