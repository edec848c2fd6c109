"""The check of one generated layout case (``dsv41_rope/conformance/test_generated_layouts.py``, the gating-power test's
layout probes): the implementation under test on strided views of values, angles and upstream gradient that
``dsv41_rope.conformance.layouts`` builds, against its reference (``references``: the oracle and the eager path on
CUDA; on a CPU, the oracle for a call that ran a Triton kernel, the CPU's eager path otherwise), with
every storage element outside what the op may write kept bit for bit. The comparisons and their report records are those
of :mod:`dsv41_rope.conformance.checks`, compared and failing as :mod:`dsv41_rope.conformance.comparisons` says.
"""

from __future__ import annotations

import torch

from dsv41_rope.conformance.checks import (
    AUTOGRAD_NORMALIZATION,
    contraction_of,
    eager_reference,
    held_call,
    kernel_frequencies_of,
    on_cpu,
)
from dsv41_rope.conformance.comparisons import assert_bits, caveated, hex_of
from dsv41_rope.conformance.layouts import GeneratedInputs, LayoutSpec, build_inputs
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import Implementation, Judged, judged
from dsv41_rope.oracle import eager as oracle_eager
from dsv41_rope.oracle.rounding import bits

__all__ = [
    "GENERATED_BACKWARD_VS_EAGER",
    "GENERATED_BACKWARD_VS_ORACLE",
    "GENERATED_FORWARD_VS_EAGER",
    "GENERATED_FORWARD_VS_ORACLE",
    "GENERATED_IN_PLACE_VS_EAGER",
    "GENERATED_IN_PLACE_VS_ORACLE",
    "check_generated_case",
]

# Their comparisons carry their own labels, so that the ulp-drift report shows them in rows of their own.
GENERATED_FORWARD_VS_ORACLE = "generated-fused-vs-oracle"
GENERATED_BACKWARD_VS_ORACLE = "generated-backward-vs-oracle"
GENERATED_FORWARD_VS_EAGER = "generated-fused-vs-eager"
GENERATED_BACKWARD_VS_EAGER = "generated-backward-vs-eager"
GENERATED_IN_PLACE_VS_ORACLE = "generated-in-place-vs-oracle"
GENERATED_IN_PLACE_VS_EAGER = "generated-in-place-vs-eager"


@caveated
def check_generated_case(
    spec: LayoutSpec, device: torch.device, implementation: Judged, ulp_drift=None, *, in_place: bool = False
) -> None:
    """One generated case, checked against its reference: the oracle (a GPU; a CPU call that ran Triton code) and
    the device's eager path (a GPU; a CPU call that ran PyTorch code).

    Out of place (the implementation's forward): the forward (or inverse, as the spec says) equals the oracle bit for
    bit; the autograd gradient for the spec's upstream gradient equals the oracle backward up to the signed zeros and
    NaN payloads of eager's accumulation (as :func:`gradient_is_conjugate_rotation` allows); values, angles and the
    upstream gradient keep every bit of their storages.

    In place (its in-place function, ``(values, angles, *, inverse) -> values``): the values view afterwards holds
    the out-of-place op's bits (the oracle's), the call returns ``values`` itself, and nothing else changes: not the
    storage around the view, not the angles. An overlapping view (expanded values) must be refused, unwritten.

    A failure (or an exception the implementation raised) ends with Python code that rebuilds the inputs and runs the
    implementation judged on them
    (:meth:`LayoutSpec.reproduction`); under the interpreter it says when the failure may be the interpreter's casts
    (``checks.interpreter_caveat``).
    """
    implementation = judged(implementation)
    function = implementation.in_place_name if in_place else implementation.function_name
    try:
        if in_place:
            _in_place_matches(spec, device, implementation, ulp_drift)
        else:
            _out_of_place_matches(spec, device, implementation, ulp_drift)
    except Exception as failure:  # a failed comparison, or the implementation crashing on this layout
        code = spec.reproduction(device, str(function), in_place=in_place)
        failure.add_note(f"\nThis case, rebuilt and run through {function}:\n{code}")
        raise


def _out_of_place_matches(spec: LayoutSpec, device: torch.device, implementation: Implementation, ulp_drift) -> None:
    inputs = build_inputs(spec, device)
    storages_before = _storages(inputs)
    leaf = inputs.values.detach().requires_grad_(True)

    def forward_and_backward() -> tuple[torch.Tensor, torch.Tensor]:
        output = implementation.forward(leaf, inputs.angles, inverse=spec.inverse)
        return output, torch.autograd.grad(output, leaf, inputs.grad_output)[0]

    (output, gradient), reference = held_call(device, implementation, forward_and_backward, ulp_drift)
    _assert_storages_unchanged(spec, inputs, storages_before)

    if reference.uses_oracle:
        values, upstream = on_cpu(inputs.values, None), on_cpu(inputs.grad_output, None)
        frequencies = on_cpu(kernel_frequencies_of(inputs.angles, implementation), None)
        contraction = contraction_of(device)
        expected = oracle_eager.apply_rope(values, frequencies, inverse=spec.inverse, contraction=contraction)
        output_on_cpu = on_cpu(output, None)
        label = GENERATED_FORWARD_VS_ORACLE
        assert_bits(ulp_drift, label, spec, device, output_on_cpu, expected, values=values, held_to=reference.name)
        expected_gradient = oracle_eager.apply_rope_backward(
            upstream, frequencies, inverse=spec.inverse, contraction=contraction
        )
        assert_bits(
            ulp_drift,
            GENERATED_BACKWARD_VS_ORACLE,
            spec,
            device,
            on_cpu(gradient, None),
            expected_gradient,
            values=upstream,
            allow=AUTOGRAD_NORMALIZATION,
            held_to=reference.name,
        )
    if reference.eager_on_device:
        eager = eager_reference(inputs.values, inputs.angles, spec.inverse)
        label = GENERATED_FORWARD_VS_EAGER
        assert_bits(ulp_drift, label, spec, device, output, eager, values=inputs.values, held_to=reference.name)
        eager_leaf = inputs.values.detach().requires_grad_(True)
        eager_output = eager_reference(eager_leaf, inputs.angles, spec.inverse)
        (eager_gradient,) = torch.autograd.grad(eager_output, eager_leaf, inputs.grad_output)
        assert_bits(
            ulp_drift,
            GENERATED_BACKWARD_VS_EAGER,
            spec,
            device,
            gradient,
            eager_gradient,
            values=inputs.grad_output,
            allow=AUTOGRAD_NORMALIZATION,
            held_to=reference.name,
        )


def _in_place_matches(spec: LayoutSpec, device: torch.device, implementation: Implementation, ulp_drift) -> None:
    inputs = build_inputs(spec, device)
    storages_before = _storages(inputs)
    values = inputs.values
    if spec.values.overlapping():
        try:
            implementation.in_place(values, inputs.angles, inverse=spec.inverse)
        except (RuntimeError, ValueError):
            pass
        else:
            raise AssertionError(f"{spec.id}: the in-place op wrote an overlapping view instead of refusing it")
        _assert_storages_unchanged(spec, inputs, storages_before)
        return
    original = values.clone()
    original_on_cpu = on_cpu(original, None)
    result, reference = held_call(
        device, implementation, lambda: implementation.in_place(values, inputs.angles, inverse=spec.inverse), ulp_drift
    )
    assert result is values, f"{spec.id}: the in-place op returned a {type(result).__name__}, not its values tensor"
    _assert_storages_unchanged(spec, inputs, storages_before, written=spec.values)
    if reference.uses_oracle:
        expected = oracle_eager.apply_rope(
            original_on_cpu,
            on_cpu(kernel_frequencies_of(inputs.angles, implementation), None),
            inverse=spec.inverse,
            contraction=contraction_of(device),
        )
        label = GENERATED_IN_PLACE_VS_ORACLE
        assert_bits(
            ulp_drift,
            label,
            spec,
            device,
            on_cpu(values, None),
            expected,
            values=original_on_cpu,
            held_to=reference.name,
        )
    if reference.eager_on_device:
        eager = eager_reference(original, inputs.angles, spec.inverse)
        label = GENERATED_IN_PLACE_VS_EAGER
        assert_bits(ulp_drift, label, spec, device, values, eager, values=original, held_to=reference.name)


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
        changed = bits(storage) != bits(before[name])
        if name == "values" and written is not None:
            written.view(changed).fill_(False)
        if bool(changed.any()):
            index = int(changed.nonzero()[0])
            raise ConformanceFailure(
                f"{spec.id} inputs-unwritten: the op wrote its input: {int(changed.sum())} elements of the {name} "
                f"storage changed (of {storage.numel()}), first at storage index {index}: before "
                f"{hex_of(before[name], (index,))} after {hex_of(storage, (index,))}",
                what=f"inputs-unwritten: the {name} written",
            )
