"""Gating power: the suite's checks catch every small plausible mistake in the kernel.

Each mutation (``mutations.py``) edits one line of one module of a copy of the kernel package (the edit must match
exactly once, so a kernel change that retires a mutation fails here instead of silently passing), loads the edited
copy as a package of its own (``dsv41_rope.vendor``), and runs the suite's own checks on a handful of cases until one
fails. The unmutated copy, loaded the same way, must pass them
all, so a caught mutation is the edit and not the loading.

``LAYOUT_MUTATIONS`` are slips in the launcher's stride handling that no case of the fixed matrix exposes: for each,
the fixed-matrix probes must pass (that is what makes it a generated-only catch) and one of ``LAYOUT_PROBES``, the
generated-case check on a fixed list of layouts (``generated_checks.check_generated_case``), must fail.

Some mutations can change bits on one backend only, and are skipped on the other with the reason: on CUDA, BF16
widening by a cast is exact and the GPU's float32 arithmetic returns the canonical NaN by itself; under the
interpreter numpy never contracts a product into an add, and the lines that call libdevice (the rounded product,
cos/sin) are the CUDA halves of helpers the interpreter replaces with numpy. Every other mutation must be caught on
every backend; the CPU run (what CI does) and the GPU run together catch all of them.
"""

from __future__ import annotations

import os
import pathlib
import re
import warnings

import pytest
import torch

from dsv41_rope import vendor
from dsv41_rope.conformance import checks, generated_checks
from dsv41_rope.conformance.cases import Case, make_angles, make_values
from dsv41_rope.conformance.layouts import LayoutSpec, StridedLayout
from dsv41_rope.conformance.mutations import BACKEND_ONLY, CAUGHT_BY_CALIBRATION, LAYOUT_MUTATIONS, MUTATIONS, TARGETS
from dsv41_rope.harness import backend
from dsv41_rope.oracle import eager as oracle_eager
from dsv41_rope.oracle.eager import eager_multiply

pytestmark = pytest.mark.compile_bound  # every mutant's kernels are built anew


def _forced_variant(contraction: str, check):
    """A probe: ``check`` with the contraction variant forced by its environment variable."""

    def probe(case, device, module):
        previous = os.environ.get(module.CONTRACTION_VARIABLE)
        os.environ[module.CONTRACTION_VARIABLE] = contraction
        try:
            check(case, device, module)
        finally:
            if previous is None:
                del os.environ[module.CONTRACTION_VARIABLE]
            else:
                os.environ[module.CONTRACTION_VARIABLE] = previous

    probe.__name__ = f"{check.__name__}[{contraction}]"
    return probe


def _forward_matches_reference(case, device, module):
    """The forward against its reference, the oracle only on a GPU (a forced variant the device's eager path does not
    use has no eager bits to equal)."""
    checks.forward_matches_reference(case, device, module, eager_on_gpu=False)


def _version_counter_is_bumped(case, device, module):
    values, angles = make_values(case, device), make_angles(case, device)
    before = values._version
    module.apply_rope_triton_(values, angles, inverse=case.inverse)
    assert values._version > before, f"{case.id}: the in-place op did not bump the version counter"


def _oracle_of(case, device, module, values, angles):
    """The oracle's output for ``values`` in the device's contraction, fed the module's own cos/sin."""
    frequencies = checks.kernel_frequencies_of(angles, module).cpu()
    contraction = checks.contraction_of(device)
    return oracle_eager.apply_rope(values.cpu(), frequencies, inverse=case.inverse, contraction=contraction)


def _rows_sharing_a_position(case, device, module):
    """The forward in programs of 2 rows, heads of one position sharing its cos/sin, from the first head on and from
    later ones where there are more heads than rows (the interpreter's own launches take larger programs, which share
    nothing)."""
    values, angles = make_values(case, device), make_angles(case, device)
    config = module.LaunchConfig(block_rows=2, copy_channels=32, rotary_channels=32, num_warps=4)
    output = module.rotate(values, angles, case.inverse, config=config)
    expected = _oracle_of(case, device, module, values, angles)
    checks.assert_bits(None, "rows-sharing-a-position", case, device, output.cpu(), expected, values=values.cpu())


# Chunks of every kind in one launch: 3 whole copied chunks and a remainder of 3 channels, and rotary chunks of 2 pairs
# with a partial last one (the interpreter's own launches take each part in one chunk).
SMALL_CHUNKS = {"block_rows": 2, "copy_channels": 8, "rotary_channels": 4, "num_warps": 4}


def _every_chunk_path(case, device, module):
    """The forward and the in-place rotation in small chunks, against the oracle."""
    values, angles = make_values(case, device), make_angles(case, device)
    config = module.LaunchConfig(**SMALL_CHUNKS)
    expected = _oracle_of(case, device, module, values, angles)
    output = module.rotate(values, angles, case.inverse, config=config)
    checks.assert_bits(None, "small-chunks", case, device, output.cpu(), expected, values=values.cpu())
    rotated = module.rotate(values.clone(), angles, case.inverse, in_place=True, config=config)
    checks.assert_bits(None, "small-chunks-in-place", case, device, rotated.cpu(), expected, values=values.cpu())


def _non_uniform_eager_path_is_refused(case, device, module):
    # The H200's variant, but the other one for partial blocks.
    multiply = eager_multiply(lambda numel: ("first", "first") if numel % 512 == 0 else ("second", "first"))
    calibration = module.calibrate(device, multiply=multiply)
    assert calibration.contraction is None, f"a non-uniform eager path calibrated to {calibration.contraction}"


def _calibration_selects_the_kernel(case, device, module):
    """Calibration finds the variant of an eager path that is one: a variant an edit broke matches nothing, and then
    every call falls back to the eager path, with the right bits and no kernel (on CUDA the bit checks above pass
    then). On CUDA, the device's own eager path must calibrate to a variant too, as the suite's
    ``test_the_device_calibrates_to_one_variant`` requires."""
    contraction = checks.contraction_of(device)
    calibration = module.calibrate(device, multiply=eager_multiply(lambda numel: contraction))
    assert calibration.contraction == contraction, (
        f"calibration against an eager path of {contraction} selected {calibration.contraction}: {calibration.observed}"
    )
    if device.type == "cuda":
        calibration = module.calibrate(device)
        assert calibration.contraction is not None, f"calibration against {device}'s eager path: {calibration.observed}"


def _uncalibrated_device_gives_eager_bits(case, device, module):
    """Where the device's eager multiply matches no variant, every call takes the eager path, in its direction."""
    multiply = eager_multiply(lambda numel: ("first", "first") if numel % 512 == 0 else ("second", "first"))
    calibrations = module.calibration.CALIBRATIONS
    previous = calibrations.get(device)
    calibrations[device] = module.calibrate(device, multiply=multiply)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            values, angles = make_values(case, device), make_angles(case, device)
            output = module.apply_rope_triton(values, angles, inverse=case.inverse)
    finally:
        if previous is None:
            del calibrations[device]
        else:
            calibrations[device] = previous
    expected = checks.eager_reference(values, angles, case.inverse)
    checks.assert_bits(None, "uncalibrated-fallback-vs-eager", case, device, output, expected, values=values)


def _kernel_cos_sin_equal_polar(case, device, module):
    if device.type != "cuda":
        return  # the interpreter's cos/sin are numpy's: test_frequencies.py covers them
    angles = module.frequency_probe_angles(device)
    polar = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    differ = int((module.kernel_frequencies(angles).view(torch.int32) != polar.view(torch.int32)).sum())
    assert differ == 0, f"kernel cos/sin differ from torch.polar on {differ} sampled angles"


# The cases the checks run on: every dtype, both directions, odd channels, transposed and per-batch layouts, and
# the value regimes where rounding, NaN and zero handling show. Small shapes on every device: each mutant compiles
# its kernels anew, and size adds nothing to what a mutation can show.
PROBES = [
    (_forward_matches_reference, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (_forward_matches_reference, Case("fp32", "inverse-output", "transposed", True, "normal", small=True)),
    (_forward_matches_reference, Case("bf16", "query", "contiguous", False, "normal", small=True)),
    (_forward_matches_reference, Case("bf16", "odd-channels", "padded-rows", True, "tiny", small=True)),
    (
        _forward_matches_reference,
        Case("bf16", "batch3", "transposed", False, "special", per_batch_angles=True, small=True),
    ),
    (
        _forward_matches_reference,
        Case("bf16", "batch3", "contiguous", True, "normal", per_batch_angles=True, small=True),
    ),
    (_forward_matches_reference, Case("fp16", "index-query", "contiguous", True, "special", small=True)),
    (_forward_matches_reference, Case("fp32", "window-kv", "contiguous", False, "special", small=True)),
    (checks.gradient_is_conjugate_rotation, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    # Exact BF16 ties, and the eager fallback in both directions, out of place and in place (float64 angles, angles
    # that need a gradient).
    (_forward_matches_reference, Case("bf16", "batch3", "transposed", False, "ties", per_batch_angles=True)),
    (_forward_matches_reference, Case("fp32", "batch3", "contiguous", True, "normal", angles="float64")),
    (_forward_matches_reference, Case("bf16", "batch3", "contiguous", False, "normal", angles="require-grad")),
    (checks.in_place_matches, Case("bf16", "batch3", "contiguous", True, "normal", angles="float64")),
    (_uncalibrated_device_gives_eager_bits, Case("fp32", "batch3", "contiguous", True, "normal")),
    (checks.in_place_matches, Case("bf16", "query", "channel-strided", True, "normal", small=True)),
    (_version_counter_is_bumped, Case("fp32", "batch3", "transposed", False, "normal")),
    (_rows_sharing_a_position, Case("bf16", "batch3", "transposed", False, "normal", per_batch_angles=True)),
    (_rows_sharing_a_position, Case("fp16", "index-query", "contiguous", True, "normal", small=True)),
    (_every_chunk_path, Case("bf16", "odd-channels", "padded-rows", True, "normal")),
    (
        _forced_variant("second/none", _forward_matches_reference),
        Case("fp32", "query", "contiguous", False, "normal", small=True),
    ),
    (_non_uniform_eager_path_is_refused, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (_calibration_selects_the_kernel, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (_kernel_cos_sin_equal_polar, Case("fp32", "query", "contiguous", False, "normal", small=True)),
]


def _probe(dtype_name: str, inverse: bool, values: torch.Tensor, angles: torch.Tensor, gradient=None) -> LayoutSpec:
    """A generated-case spec with the layouts of these (empty) views; the gradient contiguous unless given."""
    return LayoutSpec(
        dtype_name=dtype_name,
        inverse=inverse,
        regime="normal",
        values=StridedLayout.of(values),
        angles=StridedLayout.of(angles),
        gradient=StridedLayout.of(gradient) if gradient is not None else StridedLayout.contiguous(tuple(values.shape)),
        seed=12,
    )


def _buffer(*shape: int) -> torch.Tensor:
    """An uninitialized tensor whose views give the probes their layouts (only its layout is used)."""
    return torch.empty(shape)


# The layouts of DeepSeek V4.1's calls that the fixed matrix lacks, independent of the kernel's text.
LAYOUT_PROBES = {
    "one-token-step-of-a-longer-sequence-angles-per-sequence": _probe(
        "bf16", False, _buffer(3, 5, 64)[:, 2:3], _buffer(3, 1, 32)
    ),
    "gradient-of-output-sum": _probe(
        "fp32", False, _buffer(2, 3, 2, 16), _buffer(1, 3, 8), gradient=_buffer(64)[0].expand(2, 3, 2, 16)
    ),
    "values-expanded-over-the-batch-angles-per-batch": _probe(
        "fp16", True, _buffer(3, 4, 2, 16)[:1].expand(3, 4, 2, 16), _buffer(3, 4, 8)
    ),
    "angles-stored-sequence-major": _probe("fp32", True, _buffer(2, 4, 24), _buffer(4, 2, 6).transpose(0, 1)),
    "sequence-slice-angles-broadcast-over-the-sequence": _probe(
        "bf16", True, _buffer(2, 9, 3, 12)[:, 2:7], _buffer(2, 1, 6)
    ),
    "angles-strided-along-pairs": _probe("bf16", True, _buffer(3, 7, 2, 96), _buffer(3, 7, 32)[..., ::2]),
    "compressed-angles-sliced-with-a-step": _probe("fp16", False, _buffer(2, 4, 40)[..., 8:], _buffer(12, 16)[::3, :8]),
}


def _load(directory: pathlib.Path, mutation: str | None = None, mutations: dict[str, tuple[str, str]] = MUTATIONS):
    """A fresh copy of the kernel package in ``directory``, with ``mutation`` applied, imported under a name of its own
    (Triton reads kernel source through ``inspect``, so the copy stays on disk). Its operators register under that
    name, so they replace neither the real kernel's nor another test's copy's."""
    name = re.sub(r"\W", "_", f"rope_{mutation or 'unmutated'}_{directory.name}")
    copy = vendor.write_copy(directory / name, name)
    if mutation is not None:
        original, mutated = mutations[mutation]
        target = copy / TARGETS[mutation]
        source = target.read_text()
        assert source.count(original) == 1, f"mutation {mutation!r} no longer applies to {TARGETS[mutation]}: update it"
        target.write_text(source.replace(original, mutated))
    return vendor.load_copy(copy)


def _first_failure(module, device) -> str | None:
    for check, case in PROBES:
        try:
            check(case, device, module)
        except AssertionError as failure:
            return f"{check.__name__}[{case.id}]: {str(failure)[:200]}"
    return None


def _first_layout_failure(module, device) -> str | None:
    for name, spec in LAYOUT_PROBES.items():
        try:
            generated_checks.check_generated_case(spec, device, module)
        except AssertionError as failure:
            return f"check_generated_case[{name}]: {str(failure)[:200]}"
    return None


def test_unmutated_copy_passes_every_probe(rope, device, tmp_path):
    module = _load(tmp_path)
    assert _first_failure(module, device) is None
    assert _first_layout_failure(module, device) is None


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_mutation_is_caught(rope, device, tmp_path, mutation):
    module = _load(tmp_path, mutation)
    other_backend = "cuda" if backend.name() == "interpreter" else "interpreter"
    if mutation in BACKEND_ONLY[other_backend]:
        pytest.skip(BACKEND_ONLY[other_backend][mutation])
    caught = _first_failure(module, device) or _first_layout_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every probe: the suite would not gate it"


@pytest.mark.parametrize("mutation", CAUGHT_BY_CALIBRATION)
def test_calibration_probe_catches_a_broken_default_variant(rope, device, tmp_path, mutation):
    module = _load(tmp_path, mutation)
    case = Case("fp32", "query", "contiguous", False, "normal", small=True)
    with pytest.raises(AssertionError, match="calibration against an eager path of"):
        _calibration_selects_the_kernel(case, device, module)


@pytest.mark.parametrize("mutation", list(LAYOUT_MUTATIONS))
def test_layout_mutation_is_caught_only_by_a_generated_layout(rope, device, tmp_path, mutation):
    module = _load(tmp_path, mutation, LAYOUT_MUTATIONS)
    caught = _first_failure(module, device)
    assert caught is None, f"the fixed-matrix probes catch {mutation!r}, so it belongs in MUTATIONS: {caught}"
    caught = _first_layout_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every generated-layout probe: the suite would not gate it"
