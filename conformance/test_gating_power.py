"""Gating power: the suite's checks catch every small plausible mistake in the kernel.

Each mutation edits one line of ``impl/rope_triton.py`` (the edit must match exactly once, so a kernel change that
retires a mutation fails here instead of silently passing), loads the edited copy as its own module, and runs the
suite's own checks on a handful of cases until one fails. The unmutated copy, loaded the same way, must pass them
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

import importlib.util
import os
import pathlib
import sys

import pytest
import torch

from conformance import backend, checks, generated_checks
from conformance.cases import Case, make_angles, make_values
from conformance.layouts import LayoutSpec, StridedLayout
from oracle import eager as oracle_eager
from oracle.eager import eager_multiply

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "impl" / "rope_triton.py"
pytestmark = pytest.mark.compile_bound  # every mutant's kernels are built anew

# name: (original text, mutated text)
MUTATIONS = {
    # The contraction of the complex multiply: the default variant (first/first), and the others.
    "real-part-fuses-second-product": (
        "real = tl.fma(x0, cos, _negate(_rounded_product(x1, sin)))",
        "real = tl.fma(_negate(x1), sin, _rounded_product(x0, cos))",
    ),
    "imaginary-part-fuses-second-product": (
        "imag = tl.fma(x0, sin, _rounded_product(x1, cos))",
        "imag = tl.fma(x1, cos, _rounded_product(x0, sin))",
    ),
    "real-part-unfused": (
        "real = tl.fma(x0, cos, _negate(_rounded_product(x1, sin)))",
        "real = _rounded_product(x0, cos) - _rounded_product(x1, sin)",
    ),
    "imaginary-part-unfused": (
        "imag = tl.fma(x0, sin, _rounded_product(x1, cos))",
        "imag = _rounded_product(x0, sin) + _rounded_product(x1, cos)",
    ),
    "second-variant-computes-first": (
        "real = tl.fma(_negate(x1), sin, _rounded_product(x0, cos))",
        "real = tl.fma(x0, cos, _negate(_rounded_product(x1, sin)))",
    ),
    "none-variant-left-to-fp-fusion": (
        "imag = _rounded_product(x0, sin) + _rounded_product(x1, cos)",
        "imag = x0 * sin + x1 * cos",
    ),
    "rounded-product-left-to-fp-fusion": (
        '"mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1',
        '"mul.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1',
    ),
    # Rounding, widening, NaNs and signs.
    "bf16-truncating-cast": ("rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16", "rounded = bits >> 16"),
    "native-narrowing-truncates": (
        "            return r.to(dtype)\n",
        '            return r.to(dtype, fp_downcast_rounding="rtz")\n',
    ),
    "bf16-widening-by-cast": (
        "return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)",
        "return x.to(tl.float32)",
    ),
    "nan-not-canonical": (
        "return tl.where(is_nan, 0x7FFFFFFF, bits).to(tl.uint32).to(tl.float32, bitcast=True)",
        "return r",
    ),
    "negation-as-subtraction": (
        "return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)",
        "return 0.0 - x",
    ),
    # Addressing.
    "rotary-block-one-pair-early": ('"pair_offset": channels - 2 * pairs,', '"pair_offset": channels - 2 * pairs - 2,'),
    "head-read-with-sequence-stride": (
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_head",
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_sequence",
    ),
    "output-written-with-values-strides": (
        "batch, position, head, stride_output_batch, stride_output_sequence, stride_output_head",
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_head",
    ),
    "frequencies-shared-by-the-batch": (
        "batch, frequency_position, frequency_position, stride_frequencies_batch, stride_frequencies_sequence, 0",
        "batch, frequency_position, frequency_position, 0, stride_frequencies_sequence, 0",
    ),
    # A program's rows: BLOCK_R rows of one batch element, heads of one position where BLOCK_R divides heads.
    "frequencies-shared-across-positions": (
        "            frequency_position = position\n",
        "            frequency_position = first_row // heads + tl.zeros((1,), dtype=tl.int32)\n",
    ),
    "shared-frequencies-of-a-row-counted-across-the-batch": (
        "frequency_position = first_row // heads + tl.zeros((1,), dtype=tl.int32)",
        "frequency_position = tl.program_id(0) * BLOCK_R // heads + tl.zeros((1,), dtype=tl.int32)",
    ),
    "first-row-counted-across-the-batch": (
        "first_row = (program - batch * programs_per_batch) * BLOCK_R",
        "first_row = program * BLOCK_R",
    ),
    # The batch element: the program id divided by a multiply-high with the launcher's magic number.
    "batch-magic-number-rounded-down": (
        "magic = -(-(1 << (32 + shift)) // divisor) - (1 << 32)",
        "magic = (1 << (32 + shift)) // divisor - (1 << 32)",
    ),
    "batch-quotient-without-the-dividend": (
        "total = tl.umulhi(dividend, magic) + dividend",
        "total = tl.umulhi(dividend, magic)",
    ),
    "frequency-pair-stride-ignored": (
        "frequency = frequency_row + pair[None, :] * stride_frequency",
        "frequency = frequency_row + pair[None, :]",
    ),
    "pair-parts-swapped": (
        "x0, x1 = tl.split(tl.reshape(x, (BLOCK_R, ROTARY_K // 2, 2)))",
        "x1, x0 = tl.split(tl.reshape(x, (BLOCK_R, ROTARY_K // 2, 2)))",
    ),
    # Chunks: a row's copied channels as whole chunks and a remainder, its rotary block in one or more chunks.
    "copy-last-whole-chunk-skipped": (
        "for chunk in range(0, whole_chunks):",
        "for chunk in range(0, whole_chunks - 1):",
    ),
    "copy-remainder-skipped": ("if whole_chunks * BLOCK_K < count:", "if False:"),
    "rotary-chunks-after-the-first-skipped": (
        "for chunk in range(1, tl.cdiv(2 * pairs, ROTARY_K)):",
        "for chunk in range(1, 1):",
    ),
    # The first rotary chunk is loaded before the copy, apart from the loop over the others.
    "first-rotary-chunk-loaded-from-the-second": (
        "            rotary_source,\n            frequency_row,\n            0,\n",
        "            rotary_source,\n            frequency_row,\n            ROTARY_K,\n",
    ),
    # Frequencies computed in the kernel (CUDA: libdevice flushes subnormal angles).
    "subnormal-sin-flushed": (
        "return libdevice.cos(angle), tl.where(subnormal, angle, libdevice.sin(angle))",
        "return libdevice.cos(angle), libdevice.sin(angle)",
    ),
    # Directions.
    "inverse-ignored": ("        sin = _flip_sign(sin, sin_sign)\n", "        sin = _flip_sign(sin, 0)\n"),
    "conjugate-not-passed-to-the-kernel": (
        '"sin_sign": _FLOAT32_SIGN_BIT if negate_sin else 0,',
        '"sin_sign": 0,',
    ),
    "sign-flip-as-or": (
        "return (x.to(tl.int32, bitcast=True) ^ sign_bit).to(tl.float32, bitcast=True)",
        "return (x.to(tl.int32, bitcast=True) | sign_bit).to(tl.float32, bitcast=True)",
    ),
    "backward-without-conjugate": (
        "return _FusedRope.apply(grad_output, angles, not ctx.inverse), None, None",
        "return _FusedRope.apply(grad_output, angles, ctx.inverse), None, None",
    ),
    # In place.
    "in-place-rotates-a-copy": (
        "_launch(values, angles, inverse, in_place=True)",
        "_launch(values, angles, inverse, in_place=False)",
    ),
    "in-place-version-not-bumped": (
        "torch.autograd.graph.increment_version(values)  # a kernel's",
        "pass  # a kernel's",
    ),
    # Calibration.
    "calibration-trusts-the-last-segment": ("uniform &= set(names)", "uniform = set(names)"),
}

# Mutations of lines one backend never runs (the kernel's helpers differ: numpy under the interpreter, libdevice on
# CUDA), or whose bits only one backend can tell apart.
BACKEND_ONLY = {
    "interpreter": {
        "bf16-widening-by-cast": "on CUDA, widening BF16 by a cast is exact; the interpreter gets subnormals wrong",
        "bf16-truncating-cast": "the interpreter's narrowing on the bit pattern; CUDA narrows with the conversion "
        "instruction (native-narrowing-truncates)",
        # Seen on the H200 (docs/gpu-runs/README.md): the mutant passed every probe, FP32 NaN payloads included.
        "nan-not-canonical": "on CUDA, the GPU's float32 fma and multiply already return the canonical NaN 0x7FFFFFFF",
    },
    "cuda": {
        "native-narrowing-truncates": "the interpreter narrows on the bit pattern; this line runs on CUDA",
        "none-variant-left-to-fp-fusion": "numpy, which the interpreter runs, never contracts a product into an add",
        "rounded-product-left-to-fp-fusion": "the interpreter's helper is a plain product; this line runs on CUDA",
        "subnormal-sin-flushed": "the interpreter computes cos/sin with numpy; this line runs on CUDA",
    },
}


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
    output = module._launch(values, angles, case.inverse, config=config)
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
    output = module._launch(values, angles, case.inverse, config=config)
    checks.assert_bits(None, "small-chunks", case, device, output.cpu(), expected, values=values.cpu())
    rotated = module._launch(values.clone(), angles, case.inverse, in_place=True, config=config)
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
    (checks.forward_matches_oracle, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (checks.forward_matches_oracle, Case("fp32", "inverse-output", "transposed", True, "normal", small=True)),
    (checks.forward_matches_oracle, Case("bf16", "query", "contiguous", False, "normal", small=True)),
    (checks.forward_matches_oracle, Case("bf16", "odd-channels", "padded-rows", True, "tiny", small=True)),
    (
        checks.forward_matches_oracle,
        Case("bf16", "batch3", "transposed", False, "special", per_batch_angles=True, small=True),
    ),
    (
        checks.forward_matches_oracle,
        Case("bf16", "batch3", "contiguous", True, "normal", per_batch_angles=True, small=True),
    ),
    (checks.forward_matches_oracle, Case("fp16", "index-query", "contiguous", True, "special", small=True)),
    (checks.forward_matches_oracle, Case("fp32", "window-kv", "contiguous", False, "special", small=True)),
    (checks.gradient_is_conjugate_rotation, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (checks.in_place_matches, Case("bf16", "query", "channel-strided", True, "normal", small=True)),
    (_version_counter_is_bumped, Case("fp32", "batch3", "transposed", False, "normal")),
    (_rows_sharing_a_position, Case("bf16", "batch3", "transposed", False, "normal", per_batch_angles=True)),
    (_rows_sharing_a_position, Case("fp16", "index-query", "contiguous", True, "normal", small=True)),
    (_every_chunk_path, Case("bf16", "odd-channels", "padded-rows", True, "normal")),
    (
        _forced_variant("second/none", checks.forward_matches_oracle),
        Case("fp32", "query", "contiguous", False, "normal", small=True),
    ),
    (_non_uniform_eager_path_is_refused, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (_calibration_selects_the_kernel, Case("fp32", "query", "contiguous", False, "normal", small=True)),
    (_kernel_cos_sin_equal_polar, Case("fp32", "query", "contiguous", False, "normal", small=True)),
]


# == Layout mutations: RE-TARGET when impl/rope_triton.py changes =====================================================
# Each entry models a slip in the launcher's handling of strides that only a generated layout exposes (its comment says
# which slip, so it can be re-targeted to a new kernel text; docs/conformance.md has the table). Each must keep every
# read inside the tensors LAYOUT_PROBES hand it (a mutant reading out of bounds could kill the process or, on a GPU,
# the CUDA context), which is why the probes' storages have room beyond their views.
LAYOUT_MUTATIONS = {
    # A size-1 dimension's stride used as if it addressed something: with a sequence of one position, the batch
    # stride taken from the sequence's, right only when x[:, t:t+1] is a tensor of its own. (The slip of issue 12: a
    # decoding step sliced from a longer buffer, one angle row per sequence.)
    "batch-stride-from-a-size1-sequence": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch if tensor.shape[1] > 1 else tensor.stride(1), sequence, head[0] if four_d else 0, "
        "tensor.stride(-1)",
    ),
    # A zero channel stride taken for contiguous channels: an expanded upstream gradient (what output.sum() sends
    # back) read as if its row held C different values.
    "zero-channel-stride-read-as-contiguous": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1) or 1",
    ),
    # An expanded (stride-0) batch taken for a canonical one: values expanded over the batch read S rows further on
    # for each batch.
    "expanded-batch-read-as-canonical": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch or tensor.shape[1] * tensor.stride(1), sequence, head[0] if four_d else 0, tensor.stride(-1)",
    ),
    # The frequencies assumed to be laid out as a contiguous tensor of their shape: angles stored in another order
    # ([S, B, P] storage viewed as [B, S, P]) or sliced with a step are read in the wrong places.
    "frequencies-assumed-contiguous": (
        "return _strides_as_indexed(frequencies, 3)",
        "return _strides_as_indexed(frequencies.contiguous(), 3)",
    ),
}


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


def _load(source: str, directory: pathlib.Path, name: str):
    """Import ``source`` as a fresh module from a file (Triton reads kernel source through ``inspect``). Its
    operators register under a namespace derived from the module name, so they do not replace the real module's."""
    path = directory / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


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


def _mutant(mutations: dict[str, tuple[str, str]], mutation: str, directory: pathlib.Path):
    original, mutated = mutations[mutation]
    source = SOURCE.read_text()
    assert source.count(original) == 1, f"mutation {mutation!r} no longer applies to {SOURCE.name}: update it"
    return _load(source.replace(original, mutated), directory, f"rope_mutant_{mutation.replace('-', '_')}")


def test_unmutated_copy_passes_every_probe(rope, device, tmp_path):
    module = _load(SOURCE.read_text(), tmp_path, "rope_unmutated")
    assert _first_failure(module, device) is None
    assert _first_layout_failure(module, device) is None


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_mutation_is_caught(rope, device, tmp_path, mutation):
    module = _mutant(MUTATIONS, mutation, tmp_path)
    other_backend = "cuda" if backend.name() == "interpreter" else "interpreter"
    if mutation in BACKEND_ONLY[other_backend]:
        pytest.skip(BACKEND_ONLY[other_backend][mutation])
    caught = _first_failure(module, device) or _first_layout_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every probe: the suite would not gate it"


# Mutations that break the kernel's default variant on the calibration's own operands. On CUDA each then calibrates
# to no variant and every call falls back to the eager path, so the bit probes pass (the H200 run of 2026-12-03 showed
# it: docs/gpu-runs/README.md) and only the calibration probe catches them. It must, on every backend.
CAUGHT_BY_CALIBRATION = [
    "real-part-fuses-second-product",
    "imaginary-part-fuses-second-product",
    "real-part-unfused",
    "imaginary-part-unfused",
    "frequencies-shared-across-positions",
]


@pytest.mark.parametrize("mutation", CAUGHT_BY_CALIBRATION)
def test_calibration_probe_catches_a_broken_default_variant(rope, device, tmp_path, mutation):
    module = _mutant(MUTATIONS, mutation, tmp_path)
    case = Case("fp32", "query", "contiguous", False, "normal", small=True)
    with pytest.raises(AssertionError, match="calibration against an eager path of"):
        _calibration_selects_the_kernel(case, device, module)


@pytest.mark.parametrize("mutation", list(LAYOUT_MUTATIONS))
def test_layout_mutation_is_caught_only_by_a_generated_layout(rope, device, tmp_path, mutation):
    module = _mutant(LAYOUT_MUTATIONS, mutation, tmp_path)
    caught = _first_failure(module, device)
    assert caught is None, f"the fixed-matrix probes catch {mutation!r}, so it belongs in MUTATIONS: {caught}"
    caught = _first_layout_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every generated-layout probe: the suite would not gate it"
