"""The checks behind the conformance suites, shared with the gating-power test that mutates the kernel.

Each check runs one case through a kernel module (``impl.rope_triton`` or a mutated copy of it), compares bits
against a reference, records the comparison in the ulp-drift report when given the ``ulp_drift`` fixture, and raises
``AssertionError`` with an LLVM-libc-style message (coordinates, input bits, result bits, expected bits) on failure.

Difference policy. A real mismatch (any bit difference that is not only the sign of a zero or a NaN payload) always
fails. NaN-payload and signed-zero differences are counted apart and fail too, except where a comparison declares
them allowed: only the comparison with the eager *backward*, whose autograd adds zero-filled partial gradients, so
that ``-0 + 0 = +0`` and NaN payloads become the canonical NaN. The report shows the allowed counts.

On a GPU the oracle and the float64 truth run on the CPU over a sample of positions (the first and last 32) of the
full-size tensors; the eager comparison covers every element. Under the interpreter every position is checked.
"""

from __future__ import annotations

import dataclasses
import types

import torch

from conformance import backend
from conformance.cases import INTEGER_VIEW, Case, make_angles, make_values
from conformance.layouts import GeneratedInputs, LayoutSpec, build_inputs
from oracle import eager as oracle_eager
from oracle import reference, ulp

SAMPLED_POSITIONS = 32
# Norm-wise error bound vs the float64 truth, in ulps of the pair magnitude in the output dtype. Derivation
# (docs/conformance.md): the final rounding costs at most 0.5 ulp; everything before it happens in float32 with
# cos/sin from torch.polar (<= 2 float32 ulps each on CUDA and glibc), one rounded product and one fma, at most
# 5 * 2**-24 * |pair| together. That is <= 0.004 ulp of BF16/FP16, and <= 4.5 float32 ulps.
NORMWISE_BOUND = {"bf16": 0.504, "fp16": 0.504, "fp32": 5.0}
# What a comparison with the eager backward allows (module docstring): autograd's zero-filled accumulation.
EAGER_BACKWARD_ALLOWED = ("signed-zero", "nan-bits")


@dataclasses.dataclass
class ForwardRun:
    """One forward call of the kernel module on a case's inputs."""

    values: torch.Tensor
    angles: torch.Tensor
    output: torch.Tensor


def run_forward(case: Case, device: torch.device, rope: types.ModuleType) -> ForwardRun:
    """Call ``rope.apply_rope_triton`` on the case's inputs and check that the inputs were left untouched."""
    values = make_values(case, device)
    angles = make_angles(case, device)
    values_before, angles_before = values.clone(), angles.clone()
    output = rope.apply_rope_triton(values, angles, case.inverse)
    assert _same_bits(values, values_before) and _same_bits(angles, angles_before), f"{case.id}: inputs were written"
    return ForwardRun(values, angles, output)


def frequencies_of(angles: torch.Tensor) -> torch.Tensor:
    """The frequencies exactly as the eager path and the kernel compute them, on the angles' device."""
    return torch.polar(torch.ones_like(angles), angles)


def positions(sequence: int, device: torch.device) -> torch.Tensor | None:
    """Positions checked against the CPU references: all under the interpreter, first and last 32 on a GPU."""
    if device.type == "cpu" or sequence <= 2 * SAMPLED_POSITIONS:
        return None
    return torch.cat([torch.arange(SAMPLED_POSITIONS), torch.arange(sequence - SAMPLED_POSITIONS, sequence)])


def on_cpu(tensor: torch.Tensor, chosen: torch.Tensor | None) -> torch.Tensor:
    """``tensor`` restricted to the chosen positions (dimension 1, unless broadcast there), on the CPU."""
    if chosen is not None and tensor.shape[1] > 1:
        tensor = tensor.index_select(1, chosen.to(tensor.device))
    return tensor.detach().cpu()


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
) -> ulp.BitDifferences:
    """Compare bits, record, and fail on a real mismatch or on a NaN-bit/signed-zero difference not in ``allow``.

    The comparison runs where the tensors are (the GPU for eager comparisons of full-size tensors). ``case`` is a
    fixed-matrix :class:`Case` or a generated :class:`LayoutSpec`: its ``id`` names it in the message, its
    ``dtype_name`` goes to the report."""
    diffs = ulp.compare_bits(actual, expected)
    detail = describe_mismatch(diffs.first_mismatch_index, actual, expected, values) if diffs.mismatches else ""
    record(ulp_drift, comparison, case, device, diffs, allowed=",".join(allow), detail=detail)
    problems = []
    if diffs.mismatches:
        problems.append(f"{diffs.mismatches} bit mismatches (max {diffs.max_distance} ulp); first: {detail}")
    if diffs.nan_bit_differences and "nan-bits" not in allow:
        problems.append(f"{diffs.nan_bit_differences} NaN bit-pattern differences")
    if diffs.signed_zero_differences and "signed-zero" not in allow:
        problems.append(f"{diffs.signed_zero_differences} signed-zero differences")
    assert not problems, f"{case.id} {comparison}: " + "; ".join(problems) + f" of {diffs.elements} elements"
    return diffs


def describe_mismatch(
    index: int | None, actual: torch.Tensor, expected: torch.Tensor, values: torch.Tensor | None
) -> str:
    """Where the first mismatch is and the bits involved: input pair, result, expected."""
    if index is None:
        return ""
    coordinates = tuple(int(i) for i in torch.unravel_index(torch.tensor(index), actual.shape))
    text = f"at {coordinates}: result {_hex(actual, coordinates)} expected {_hex(expected, coordinates)}"
    if values is not None:
        pair_start = coordinates[-1] - ((coordinates[-1] - actual.shape[-1]) % 2)
        pair = [coordinates[:-1] + (channel,) for channel in (pair_start, pair_start + 1) if channel < values.shape[-1]]
        text += " input " + ",".join(_hex(values, c) for c in pair)
    return text


def _hex(tensor: torch.Tensor, coordinates: tuple[int, ...]) -> str:
    element = tensor.detach()[coordinates].cpu()
    width = 4 if tensor.element_size() == 2 else 8
    bits = int(element.reshape(1).view(INTEGER_VIEW[tensor.dtype]).item()) & ((1 << (4 * width)) - 1)
    return f"0x{bits:0{width}X}({float(element):.9g})"


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    integer = INTEGER_VIEW.get(a.dtype)
    if integer is None:
        return torch.equal(a, b)
    return torch.equal(a.contiguous().view(integer), b.contiguous().view(integer))


def forward_matches_oracle(case: Case, device: torch.device, rope: types.ModuleType, ulp_drift=None) -> None:
    """The fused forward equals the oracle's reproduction of CUDA eager, fed the device's own frequencies."""
    run = run_forward(case, device, rope)
    chosen = positions(run.values.shape[1], device)
    values = on_cpu(run.values, chosen)
    expected = oracle_eager.apply_rope(values, on_cpu(frequencies_of(run.angles), chosen), inverse=case.inverse)
    assert_bits(ulp_drift, "fused-vs-oracle", case, device, on_cpu(run.output, chosen), expected, values=values)


def forward_matches_eager(case: Case, device: torch.device, rope: types.ModuleType, ulp_drift=None) -> None:
    """The fused forward equals PyTorch's eager path on the same device, every element."""
    run = run_forward(case, device, rope)
    expected = rope._apply_rope_torch(run.values, run.angles, case.inverse)
    assert_bits(ulp_drift, "fused-vs-eager", case, device, run.output, expected, values=run.values)


def copied_channels_are_copies(case: Case, device: torch.device, rope: types.ModuleType, ulp_drift=None) -> None:
    """Channels before the rotary block are bit copies, NaN payloads and signalling NaNs included."""
    values = make_values(case, device)
    channels, pairs = values.shape[-1], case.shape.pairs
    generator = torch.Generator(device=device).manual_seed(case.seed + 3)
    integer = INTEGER_VIEW[case.dtype]
    limit = 2 ** (8 * values.element_size() - 1)
    random_bits = torch.randint(-limit, limit, values.shape, generator=generator, device=device, dtype=torch.int64)
    values.view(integer)[..., : channels - 2 * pairs] = random_bits[..., : channels - 2 * pairs].to(integer)
    output = rope.apply_rope_triton(values, make_angles(case, device), case.inverse)
    assert_bits(
        ulp_drift,
        "copied-vs-input",
        case,
        device,
        output[..., : channels - 2 * pairs],
        values[..., : channels - 2 * pairs],
    )


def gradient_is_conjugate_rotation(case: Case, device: torch.device, rope: types.ModuleType, ulp_drift=None) -> None:
    """The autograd gradient for upstream g is the fused op on g with the opposite ``inverse``, bit for bit; it
    equals the oracle backward (and the eager backward on a GPU) up to the documented zero/NaN normalization of
    autograd's accumulation; and it does not depend on the values."""
    values = make_values(case, device)
    angles = make_angles(case, device)
    grad_output = make_values(case, device, salt=1)
    leaf = values.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(rope.apply_rope_triton(leaf, angles, case.inverse), leaf, grad_output)
    rotated_back = rope.apply_rope_triton(grad_output, angles, not case.inverse)
    assert_bits(ulp_drift, "backward-vs-conjugate", case, device, gradient, rotated_back, values=grad_output)

    other_leaf = make_values(case, device, salt=2).detach().requires_grad_(True)
    (other,) = torch.autograd.grad(rope.apply_rope_triton(other_leaf, angles, case.inverse), other_leaf, grad_output)
    assert_bits(ulp_drift, "backward-independent-of-values", case, device, other, gradient)

    chosen = positions(values.shape[1], device)
    upstream = on_cpu(grad_output, chosen)
    expected = oracle_eager.apply_rope_backward(upstream, on_cpu(frequencies_of(angles), chosen), inverse=case.inverse)
    allow = EAGER_BACKWARD_ALLOWED
    assert_bits(
        ulp_drift, "backward-vs-oracle", case, device, on_cpu(gradient, chosen), expected, values=upstream, allow=allow
    )
    if device.type == "cuda":
        eager_leaf = values.detach().requires_grad_(True)
        (eager,) = torch.autograd.grad(
            rope._apply_rope_torch(eager_leaf, angles, case.inverse), eager_leaf, grad_output
        )
        assert_bits(ulp_drift, "backward-vs-eager", case, device, gradient, eager, values=grad_output, allow=allow)


def error_within_bound(case: Case, device: torch.device, rope: types.ModuleType, ulp_drift=None) -> None:
    """Error against the float64 truth: norm-wise within ``NORMWISE_BOUND``; elementwise reported, not bounded
    (it is unbounded near cancellation, when a rotated value is close to 0 while its pair is not)."""
    run = run_forward(case, device, rope)
    chosen = positions(run.values.shape[1], device)
    pairs = case.shape.pairs
    truth = reference.apply_rope(on_cpu(run.values, chosen), on_cpu(run.angles, chosen), inverse=case.inverse)
    rotated, rotated_truth = on_cpu(run.output, chosen)[..., -2 * pairs :], truth[..., -2 * pairs :]
    elementwise = ulp.summarize(ulp.error(rotated, rotated_truth))
    normwise_errors = ulp.normwise_error(rotated, rotated_truth)
    normwise = ulp.summarize(normwise_errors)
    bound = NORMWISE_BOUND[case.dtype_name]
    if ulp_drift is not None:
        ulp_drift.record(
            comparison="fused-vs-truth",
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
        worst = int(torch.as_tensor(normwise_errors).reshape(-1).argmax())
        coordinates = tuple(int(i) for i in torch.unravel_index(torch.tensor(worst), rotated.shape))
        raise AssertionError(
            f"{case.id}: norm-wise error {normwise['max']:.4g} ulp > bound {bound} at {coordinates}: result "
            f"{_hex(rotated, coordinates)} truth {float(rotated_truth[coordinates]):.17g}"
        )


# -- generated cases ---------------------------------------------------------------------------------------------------
# Their comparisons carry their own labels, so that the ulp-drift report shows them in rows of their own.
GENERATED_FORWARD_VS_ORACLE = "generated-fused-vs-oracle"
GENERATED_BACKWARD_VS_ORACLE = "generated-backward-vs-oracle"
GENERATED_FORWARD_VS_EAGER = "generated-fused-vs-eager"
GENERATED_BACKWARD_VS_EAGER = "generated-backward-vs-eager"
GENERATED_IN_PLACE_VS_ORACLE = "generated-in-place-vs-oracle"
GENERATED_IN_PLACE_VS_EAGER = "generated-in-place-vs-eager"


def check_generated_case(
    spec: LayoutSpec, device: torch.device, rope: types.ModuleType, ulp_drift=None, *, in_place: bool = False
) -> None:
    """One generated case, checked against the oracle (every backend) and PyTorch's eager path (CUDA).

    Out of place (``rope.apply_rope_triton``): the forward (or inverse, as the spec says) equals the oracle bit for
    bit; the autograd gradient for the spec's upstream gradient equals the oracle backward up to the signed zeros and
    NaN payloads of eager's accumulation (as :func:`gradient_is_conjugate_rotation` allows); values, angles and the
    upstream gradient keep every bit of their storages.

    In place (``rope.apply_rope_triton_(values, angles, *, inverse) -> values``): the values view afterwards holds
    the out-of-place op's bits (the oracle's), the call returns ``values`` itself, and nothing else changes: not the
    storage around the view, not the angles. An overlapping view (expanded values) must be refused, unwritten.

    A failure message ends with Python code that rebuilds the inputs (:meth:`LayoutSpec.reproduction`).
    """
    try:
        if in_place:
            _in_place_matches(spec, device, rope, ulp_drift)
        else:
            _out_of_place_matches(spec, device, rope, ulp_drift)
    except AssertionError as failure:
        failure.add_note(
            f"\nThe inputs of this case, rebuilt (run from the repository root):\n{spec.reproduction(device)}"
        )
        raise


def _out_of_place_matches(spec: LayoutSpec, device: torch.device, rope: types.ModuleType, ulp_drift) -> None:
    inputs = build_inputs(spec, device)
    storages_before = _storages(inputs)
    leaf = inputs.values.detach().requires_grad_(True)
    output = rope.apply_rope_triton(leaf, inputs.angles, inverse=spec.inverse)
    (gradient,) = torch.autograd.grad(output, leaf, inputs.grad_output)
    _assert_storages_unchanged(spec, inputs, storages_before)

    values, upstream = on_cpu(inputs.values, None), on_cpu(inputs.grad_output, None)
    frequencies = on_cpu(frequencies_of(inputs.angles), None)
    expected = oracle_eager.apply_rope(values, frequencies, inverse=spec.inverse)
    assert_bits(ulp_drift, GENERATED_FORWARD_VS_ORACLE, spec, device, on_cpu(output, None), expected, values=values)
    expected_gradient = oracle_eager.apply_rope_backward(upstream, frequencies, inverse=spec.inverse)
    assert_bits(
        ulp_drift,
        GENERATED_BACKWARD_VS_ORACLE,
        spec,
        device,
        on_cpu(gradient, None),
        expected_gradient,
        values=upstream,
        allow=EAGER_BACKWARD_ALLOWED,
    )
    if device.type == "cuda":
        eager = rope._apply_rope_torch(inputs.values, inputs.angles, inverse=spec.inverse)
        assert_bits(ulp_drift, GENERATED_FORWARD_VS_EAGER, spec, device, output, eager, values=inputs.values)
        eager_leaf = inputs.values.detach().requires_grad_(True)
        eager_output = rope._apply_rope_torch(eager_leaf, inputs.angles, inverse=spec.inverse)
        (eager_gradient,) = torch.autograd.grad(eager_output, eager_leaf, inputs.grad_output)
        assert_bits(
            ulp_drift,
            GENERATED_BACKWARD_VS_EAGER,
            spec,
            device,
            gradient,
            eager_gradient,
            values=inputs.grad_output,
            allow=EAGER_BACKWARD_ALLOWED,
        )


def _in_place_matches(spec: LayoutSpec, device: torch.device, rope: types.ModuleType, ulp_drift) -> None:
    inputs = build_inputs(spec, device)
    storages_before = _storages(inputs)
    values = inputs.values
    if spec.values.overlapping():
        try:
            rope.apply_rope_triton_(values, inputs.angles, inverse=spec.inverse)
        except (RuntimeError, ValueError):
            pass
        else:
            raise AssertionError(f"{spec.id}: the in-place op wrote an overlapping view instead of refusing it")
        _assert_storages_unchanged(spec, inputs, storages_before)
        return
    original = values.clone()
    original_on_cpu = on_cpu(original, None)
    expected = oracle_eager.apply_rope(
        original_on_cpu, on_cpu(frequencies_of(inputs.angles), None), inverse=spec.inverse
    )
    result = rope.apply_rope_triton_(values, inputs.angles, inverse=spec.inverse)
    assert result is values, f"{spec.id}: the in-place op returned a {type(result).__name__}, not its values tensor"
    _assert_storages_unchanged(spec, inputs, storages_before, written=spec.values)
    assert_bits(
        ulp_drift, GENERATED_IN_PLACE_VS_ORACLE, spec, device, on_cpu(values, None), expected, values=original_on_cpu
    )
    if device.type == "cuda":
        eager = rope._apply_rope_torch(original, inputs.angles, inverse=spec.inverse)
        assert_bits(ulp_drift, GENERATED_IN_PLACE_VS_EAGER, spec, device, values, eager, values=original)


def _storages(inputs: GeneratedInputs) -> dict[str, torch.Tensor]:
    return {
        "values": inputs.values_storage.clone(),
        "angles": inputs.angles_storage.clone(),
        "upstream gradient": inputs.gradient_storage.clone(),
    }


def _assert_storages_unchanged(
    spec: LayoutSpec, inputs: GeneratedInputs, before: dict[str, torch.Tensor], *, written=None
) -> None:
    """Every storage element keeps its bits, except those of the values view ``written`` (an in-place op's)."""
    now = {
        "values": inputs.values_storage,
        "angles": inputs.angles_storage,
        "upstream gradient": inputs.gradient_storage,
    }
    for name, storage in now.items():
        integer = INTEGER_VIEW[storage.dtype]
        changed = storage.view(integer) != before[name].view(integer)
        if name == "values" and written is not None:
            written.view(changed).fill_(False)
        if bool(changed.any()):
            index = int(changed.nonzero()[0])
            raise AssertionError(
                f"{spec.id}: the op wrote its input: {int(changed.sum())} elements of the {name} storage changed, "
                f"first at storage index {index}: {_hex(before[name], (index,))} -> {_hex(storage, (index,))}"
            )
