"""The generated-case check fails on the faults it is there to find, and passes the kernel: wrong bits (with the
code that rebuilds the inputs in the message), inputs written, and for the in-place op, writes around the view, an
overlapping view written instead of refused, a new tensor returned. The in-place faults are made from an in-place op
built on the out-of-place one; test_generated_layouts.py runs the kernel's own."""

from __future__ import annotations

import types

import pytest
import torch

from dsv41_rope.conformance import generated_checks
from dsv41_rope.conformance.layouts import LayoutSpec, StridedLayout
from dsv41_rope.harness.implementation import FunctionName, Implementation


def _spec(values: torch.Tensor, angles: torch.Tensor, **fields) -> LayoutSpec:
    fields = {"dtype_name": "fp32", "inverse": False, "regime": "normal", **fields}
    return LayoutSpec(
        values=StridedLayout.of(values),
        angles=StridedLayout.of(angles),
        gradient=StridedLayout.contiguous(tuple(values.shape)),
        **fields,
    )


ONE_TOKEN_STEP = _spec(torch.empty(3, 5, 2, 16)[:, 2:3], torch.empty(3, 1, 8), position_start=7, seed=3)
EXPANDED_BATCH = _spec(torch.empty(1, 4, 2, 16).expand(3, 4, 2, 16), torch.empty(3, 4, 8), dtype_name="bf16")


class _Recorder:
    def __init__(self) -> None:
        self.comparisons: list[str] = []
        self.metadata: dict[str, object] = {}

    def record(self, *, comparison: str, **fields) -> None:
        self.comparisons.append(comparison)

    def add_run_metadata(self, key: str, value: object) -> None:
        self.metadata[key] = value


def _with(rope: types.ModuleType, **operations) -> Implementation:
    """An implementation to judge: the kernel's out-of-place function and no in-place one, either replaced."""
    forward = operations.get("apply_rope_triton", rope.apply_rope_triton)
    in_place = operations.get("apply_rope_triton_")
    return Implementation(
        FunctionName("fake", "apply_rope_triton"),
        forward,
        FunctionName("fake", "apply_rope_triton_") if in_place else None,
        in_place,
    )


def _in_place_by_copy(rope: types.ModuleType):
    """A correct in-place op made from the out-of-place one; it refuses overlapping views."""

    def apply_rope_triton_(values, angles, *, inverse=False):
        if StridedLayout.of(values).overlapping():
            raise ValueError("values overlap")
        values.copy_(rope.apply_rope_triton(values, angles, inverse=inverse))
        return values

    return apply_rope_triton_


@pytest.mark.parametrize("spec", [ONE_TOKEN_STEP, EXPANDED_BATCH], ids=["one-token-step", "expanded-batch"])
def test_kernel_passes_and_its_comparisons_are_recorded(rope, device, spec):
    recorder = _Recorder()
    generated_checks.check_generated_case(spec, device, rope, recorder)
    assert recorder.comparisons[:2] == ["generated-fused-vs-oracle", "generated-backward-vs-oracle"]
    held_to = "eager CUDA" if device.type == "cuda" else "eager CUDA, emulated"
    assert list(recorder.metadata["references"]) == [held_to]


def test_wrong_bits_fail_with_the_inputs_as_code(rope, device):
    def shifted(values, angles, inverse=False):
        return rope.apply_rope_triton(values, angles + 1e-3, inverse=inverse)

    with pytest.raises(AssertionError, match="generated-fused-vs-oracle: .* bit mismatches") as failure:
        generated_checks.check_generated_case(ONE_TOKEN_STEP, device, _with(rope, apply_rope_triton=shifted))
    notes = "".join(failure.value.__notes__)
    assert "values = values_storage.as_strided((3, 1, 2, 16), (160, 32, 16, 1), 64)" in notes
    # It runs the implementation judged, not the project's kernel.
    assert "from fake import apply_rope_triton\n" in notes and "dsv41_rope.kernel" not in notes
    assert "output = apply_rope_triton(leaf, angles, inverse=False)" in notes


def test_an_implementation_crashing_on_a_layout_gets_the_inputs_as_code(rope, device):
    def crashes(values, angles, inverse=False):
        raise RuntimeError("Tensor must have a storage_offset divisible by 2")

    with pytest.raises(RuntimeError, match="storage_offset") as failure:
        generated_checks.check_generated_case(ONE_TOKEN_STEP, device, _with(rope, apply_rope_triton=crashes))
    notes = "".join(failure.value.__notes__)
    assert "from fake import apply_rope_triton\n" in notes and "values = values_storage.as_strided(" in notes


def test_an_op_writing_its_angles_fails(rope, device):
    def writes_angles(values, angles, inverse=False):
        output = rope.apply_rope_triton(values, angles, inverse=inverse)
        angles.data.add_(1.0)  # behind autograd's back: the kernel saves the angles for its backward
        return output

    with pytest.raises(AssertionError, match="the op wrote its input: 24 elements of the angles storage changed"):
        generated_checks.check_generated_case(ONE_TOKEN_STEP, device, _with(rope, apply_rope_triton=writes_angles))


@pytest.mark.parametrize("spec", [ONE_TOKEN_STEP, EXPANDED_BATCH], ids=["one-token-step", "expanded-batch"])
def test_a_correct_in_place_op_passes(rope, device, spec):
    in_place = _with(rope, apply_rope_triton_=_in_place_by_copy(rope))
    generated_checks.check_generated_case(spec, device, in_place, in_place=True)


def test_an_in_place_op_writing_around_the_view_fails(rope, device):
    correct = _in_place_by_copy(rope)

    def spills(values, angles, *, inverse=False):
        correct(values, angles, inverse=inverse)
        values.as_strided((1,), (1,), 0).fill_(7.0)  # storage element 0 lies before the one-token view
        return values

    with pytest.raises(AssertionError, match="the op wrote its input: 1 elements of the values storage changed"):
        generated_checks.check_generated_case(
            ONE_TOKEN_STEP, device, _with(rope, apply_rope_triton_=spills), in_place=True
        )


def test_an_in_place_op_accepting_an_overlapping_view_fails(rope, device):
    def accepts(values, angles, *, inverse=False):
        return values

    with pytest.raises(AssertionError, match="wrote an overlapping view instead of refusing it"):
        generated_checks.check_generated_case(
            EXPANDED_BATCH, device, _with(rope, apply_rope_triton_=accepts), in_place=True
        )


def test_an_in_place_op_returning_a_new_tensor_fails(rope, device):
    def out_of_place(values, angles, *, inverse=False):
        return rope.apply_rope_triton(values, angles, inverse=inverse)

    with pytest.raises(AssertionError, match="returned a Tensor, not its values tensor"):
        generated_checks.check_generated_case(
            ONE_TOKEN_STEP, device, _with(rope, apply_rope_triton_=out_of_place), in_place=True
        )
