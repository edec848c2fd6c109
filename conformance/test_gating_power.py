"""Gating power: the suite's checks catch every small plausible mistake in the kernel.

Each mutation edits one line of ``impl/rope_triton.py`` (the edit must match exactly once, so a kernel change that
retires a mutation fails here instead of silently passing), loads the edited copy as its own module, and runs the
suite's own checks on a handful of cases until one fails. The unmutated copy, loaded the same way, must pass them
all, so a caught mutation is the edit and not the loading.

``LAYOUT_MUTATIONS`` are slips in the launcher's stride handling that no case of the fixed matrix exposes: for each,
the fixed-matrix probes must pass (that is what makes it a generated-only catch) and one of ``LAYOUT_PROBES``, the
generated-case check on a fixed list of layouts (``checks.check_generated_case``), must fail.

Some mutations change bits only under the interpreter: on CUDA, BF16 widening by a cast is exact, Triton's default
fp-fusion may contract an unfused ``a * b + c`` into the very fma the kernel spells out, and the GPU's float32
arithmetic returns the canonical NaN by itself, so dropping the FP32 canonicalization changes nothing there. Those
are skipped on CUDA with that reason (the CPU run, which CI does, still requires them caught); every other
mutation must be caught on every backend.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

import pytest
import torch

from conformance import backend, checks
from conformance.cases import Case
from conformance.layouts import LayoutSpec, StridedLayout

SOURCE = pathlib.Path(__file__).resolve().parents[1] / "impl" / "rope_triton.py"

# name: (original text, mutated text)
MUTATIONS = {
    "real-part-fuses-second-product": (
        "real = tl.fma(x0, cos, _negate(x1 * sin))",
        "real = tl.fma(_negate(x1), sin, x0 * cos)",
    ),
    "imaginary-part-fuses-second-product": ("imag = tl.fma(x0, sin, x1 * cos)", "imag = tl.fma(x1, cos, x0 * sin)"),
    "real-part-unfused": ("real = tl.fma(x0, cos, _negate(x1 * sin))", "real = x0 * cos - x1 * sin"),
    "imaginary-part-unfused": ("imag = tl.fma(x0, sin, x1 * cos)", "imag = x0 * sin + x1 * cos"),
    "bf16-truncating-cast": ("rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16", "rounded = bits >> 16"),
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
    "rotary-block-one-pair-early": ("        channels - 2 * pairs,\n", "        channels - 2 * pairs - 2,\n"),
    "head-read-with-sequence-stride": ("head.to(tl.int64) * stride_head", "head.to(tl.int64) * stride_sequence"),
    "inverse-ignored": ("        if NEGATE_SIN:\n", "        if False:\n"),
    "backward-without-conjugate": (
        "return _FusedRope.apply(grad_output, frequencies, not ctx.inverse), None, None",
        "return _FusedRope.apply(grad_output, frequencies, ctx.inverse), None, None",
    ),
    "per-batch-frequencies-not-folded": (
        "    if table.shape[0] > 1:\n        stride_sequence",
        "    if False:\n        stride_sequence",
    ),
}

FUSION_MAY_UNDO = "on CUDA, Triton's default fp-fusion may contract the unfused expression into the same fma"
INTERPRETER_ONLY = {
    "real-part-unfused": FUSION_MAY_UNDO,
    "imaginary-part-unfused": FUSION_MAY_UNDO,
    "bf16-widening-by-cast": "on CUDA, widening BF16 by a cast is exact; only the interpreter gets subnormals wrong",
    # Seen on the H200 (docs/gpu-runs/README.md): the mutant passed every probe, FP32 NaN payloads included.
    "nan-not-canonical": "on CUDA, the GPU's float32 fma and multiply already return the canonical NaN 0x7FFFFFFF",
}

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
]


# == Layout mutations: RE-TARGET when impl/rope_triton.py changes =====================================================
# Each entry models a slip in the launcher's handling of strides that only a generated layout exposes (its comment says
# which slip, so it can be re-targeted to a new kernel text; docs/conformance.md has the table). Each must keep every
# read inside the tensors LAYOUT_PROBES hand it (a mutant reading out of bounds could kill the process or, on a GPU,
# the CUDA context), which is why the probes' storages have room beyond their views.
LAYOUT_MUTATIONS = {
    # A size-1 dimension's stride used as if it addressed something: the per-batch-angle fold of batch and sequence
    # steps from batch to batch by the size-1 sequence's stride, right only when x[:, t:t+1] is a tensor of its own.
    # (The slip of issue 12: a decoding step sliced from a longer buffer, one angle row per sequence.)
    "fold-steps-by-size1-sequence-stride": (
        "stride_sequence = stride_sequence if sequence > 1 else stride_batch",
        "stride_sequence = stride_sequence",
    ),
    # A zero channel stride taken for contiguous channels: only channel strides above 1 are copied first, so an
    # expanded upstream gradient (what output.sum() sends back) is read as if its row held C different values.
    "zero-channel-stride-read-as-contiguous": ("if values.stride(-1) != 1:", "if values.stride(-1) > 1:"),
    # An expanded (stride-0) batch taken for one that folds into the sequence: with per-batch angles, values expanded
    # over the batch are read S rows further on for each batch.
    "expanded-batch-folded-into-sequence": (
        "return values.shape[1] == 1 or values.stride(0) == values.shape[1] * values.stride(1)",
        "return values.shape[1] == 1 or values.stride(0) in (0, values.shape[1] * values.stride(1))",
    ),
    # torch.polar's output assumed contiguous (only the sequence broadcast copied): it keeps the angles' storage
    # order, so angles stored in another order ([S, B, P] storage viewed as [B, S, P]) are read in storage order.
    "frequencies-assumed-contiguous": (
        "return table.contiguous()",
        "return table.contiguous() if table.stride(1) == 0 else table",
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
    "compressed-angles-sliced-with-a-step": _probe("fp16", False, _buffer(2, 4, 40)[..., 8:], _buffer(12, 16)[::3, :8]),
}

OPERATOR = '"dsv41_rope::rotate"'


def _load(source: str, directory: pathlib.Path, name: str):
    """Import ``source`` as a fresh module from a file (Triton reads kernel source through ``inspect``).

    The copy registers its launch operator under its own namespace: PyTorch operators are global, and a copy that
    reused ``dsv41_rope::rotate`` would replace the real module's implementation for the rest of the session.
    """
    assert source.count(OPERATOR) == 1, f"the operator name {OPERATOR} is no longer in {SOURCE.name}: update this test"
    source = source.replace(OPERATOR, f'"{name}::rotate"')
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
            checks.check_generated_case(spec, device, module)
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
    if mutation in INTERPRETER_ONLY and backend.name() == "cuda":
        pytest.skip(INTERPRETER_ONLY[mutation])
    caught = _first_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every probe: the suite would not gate it"


@pytest.mark.parametrize("mutation", list(LAYOUT_MUTATIONS))
def test_layout_mutation_is_caught_only_by_a_generated_layout(rope, device, tmp_path, mutation):
    module = _mutant(LAYOUT_MUTATIONS, mutation, tmp_path)
    caught = _first_failure(module, device)
    assert caught is None, f"the fixed-matrix probes catch {mutation!r}, so it belongs in MUTATIONS: {caught}"
    caught = _first_layout_failure(module, device)
    assert caught is not None, f"mutation {mutation!r} passed every generated-layout probe: the suite would not gate it"
