"""What the suite says when it judges an implementation it did not write: every kind of difference with its first
position, input bits, got and expected; what eager raised for an input the implementation accepted; a function that
cannot be called as ``fn(values, angles, inverse=...)`` is not taken for one that rejects bad input; and, under
Triton's interpreter, which failures of a Triton kernel may be the interpreter's casts rather than the kernel's.
"""

from __future__ import annotations

import sys

import pytest
import torch
import triton

from dsv41_rope.conformance import checks, rejections
from dsv41_rope.conformance.cases import Case
from dsv41_rope.conformance.comparisons import assert_bits, interpreter_caveat
from dsv41_rope.harness import backend
from dsv41_rope.harness.failures import ConformanceFailure
from dsv41_rope.harness.implementation import load
from dsv41_rope.report import FROM_TESTS, INTERPRETER_ARTEFACTS, TESTS_FAILED, CaseRecord, Report, verdict

CPU = torch.device("cpu")
CASE = Case("bf16", "pairs1", "contiguous", False, "normal")
TRITON_KERNEL = '''
"""A small Triton RoPE, as a newcomer writes it: float32 arithmetic, then `.to()` the output dtype."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate(x_ptr, cos_ptr, sin_ptr, out_ptr, channels, pairs, heads, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    lead = channels - 2 * pairs
    index = tl.arange(0, BLOCK)
    copied = index < lead
    tl.store(out_ptr + row * channels + index, tl.load(x_ptr + row * channels + index, mask=copied), mask=copied)
    rotary = index < pairs
    base = row * channels + lead + 2 * index
    x0 = tl.load(x_ptr + base, mask=rotary).to(tl.float32)
    x1 = tl.load(x_ptr + base + 1, mask=rotary).to(tl.float32)
    c = tl.load(cos_ptr + (row // heads) * pairs + index, mask=rotary)
    s = tl.load(sin_ptr + (row // heads) * pairs + index, mask=rotary)
    tl.store(out_ptr + base, tl.fma(x0, c, -(x1 * s)).to(out_ptr.dtype.element_ty), mask=rotary)
    tl.store(out_ptr + base + 1, tl.fma(x0, s, x1 * c).to(out_ptr.dtype.element_ty), mask=rotary)


def rope(values, angles, *, inverse=False):
    batch, sequence, pairs = values.shape[0], values.shape[1], angles.shape[-1]
    heads = values.shape[2] if values.dim() == 4 else 1
    frequencies = torch.polar(torch.ones_like(angles), angles).expand(batch, sequence, pairs)
    cos, sin = frequencies.real.contiguous(), (frequencies.imag.neg() if inverse else frequencies.imag).contiguous()
    x = values.contiguous()
    out = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[-1])
    _rotate[(batch * sequence * heads,)](x, cos, sin, out, x.shape[-1], pairs, heads, BLOCK=block)
    return out
'''


def _tensor(patterns: list[int], dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.tensor(patterns, dtype=torch.int32).to(torch.int16).view(dtype).reshape(1, 1, -1)


def test_every_kind_of_difference_names_its_first_element_and_bits() -> None:
    values = _tensor([0x3F80, 0x4000, 0x3F80, 0x4000])
    expected = _tensor([0x7FC0, 0x0000, 0x3F80, 0x7FC0])
    actual = _tensor([0x7FC0, 0x8000, 0x3F80, 0x7FC1])
    with pytest.raises(ConformanceFailure) as failure:
        assert_bits(None, "fused-vs-oracle", CASE, CPU, actual, expected, values=values)
    assert str(failure.value) == (
        "bf16-4d-contiguous-pairs1-forward-normal fused-vs-oracle: "
        "1 NaN bit-pattern differences of 4 elements, first at (0, 0, 3): input 0x3F80(1),0x4000(2) got 0x7FC1(nan) "
        "expected 0x7FC0(nan); "
        "1 signed-zero differences of 4 elements, first at (0, 0, 1): input 0x3F80(1),0x4000(2) got 0x8000(-0) "
        "expected 0x0000(0)"
    )
    assert failure.value.what == "fused-vs-oracle: NaN bit-pattern differences"


def test_an_input_eager_rejects_and_the_implementation_accepts_says_what_eager_raised(tmp_path, monkeypatch) -> None:
    (tmp_path / "accepting_rope.py").write_text("def rope(values, angles, *, inverse=False):\n    return values\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    values, zero_pairs = torch.ones(1, 4, 2, 16, dtype=torch.bfloat16), torch.zeros(1, 4, 0)
    with pytest.raises(ConformanceFailure) as failure:
        rejections.rejects_what_eager_rejects(load("accepting_rope:rope"), values, zero_pairs, False)
    assert failure.value.what == "bad input: accepted an input eager rejects"
    message = str(failure.value)
    assert message.startswith("accepting_rope:rope accepted an input eager rejects (eager raised ")
    assert str(rejections.raised_by(checks.eager_reference, values, zero_pairs, False)) in message


def test_a_function_without_inverse_rejects_nothing(tmp_path, monkeypatch) -> None:
    (tmp_path / "positional_rope.py").write_text("def rope(values, angles):\n    return values\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    values, zero_pairs = torch.ones(1, 4, 2, 16, dtype=torch.bfloat16), torch.zeros(1, 4, 0)
    implementation = load("positional_rope:rope")
    assert isinstance(rejections.raised_by(implementation.forward, values, zero_pairs, False), TypeError)
    with pytest.raises(
        ConformanceFailure, match=r"positional_rope:rope cannot be called as the suite calls it: .*inverse"
    ):
        rejections.rejects_what_eager_rejects(implementation, values, zero_pairs, False)


@pytest.fixture
def triton_rope(tmp_path, monkeypatch):
    """The newcomer's Triton kernel, judged as another implementation."""
    (tmp_path / "newcomer_rope.py").write_text(TRITON_KERNEL)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield load("newcomer_rope:rope")
    sys.modules.pop("newcomer_rope", None)


@pytest.mark.skipif(not backend.interpreted(), reason="the interpreter's casts are probed under the interpreter only")
def test_the_interpreter_casts_are_probed() -> None:
    problems = backend.interpreter_cast_problems()
    if triton.__version__ != "3.9.0":
        pytest.skip(f"what the interpreter gets wrong is known for the pinned Triton 3.9.0, not {triton.__version__}")
    assert set(problems) == {"bf16"}
    assert (
        "narrows float32 to bf16 wrongly in 5 of 5 probes (1.0039072036743164 -> 0x3F80, round-to-nearest-even "
        "0x3F81)" in problems["bf16"]
    )
    assert "widens bf16 subnormals wrongly" in problems["bf16"]


@pytest.mark.skipif(not backend.interpreted(), reason="the interpreter's casts are probed under the interpreter only")
def test_a_triton_kernels_bf16_failure_under_the_interpreter_says_it_may_be_the_interpreter(triton_rope) -> None:
    if "bf16" not in backend.interpreter_cast_problems():
        pytest.skip(f"Triton {triton.__version__}'s interpreter casts float32 to bf16 exactly")
    assert triton_rope.runs_triton_kernels
    checks.forward_matches_reference(Case("fp32", "pairs1", "contiguous", False, "normal"), CPU, triton_rope)
    with pytest.raises(ConformanceFailure) as failure:
        checks.forward_matches_reference(CASE, CPU, triton_rope)
    message = str(failure.value)
    assert " bit mismatches (max 1 ulp) of 768 elements, first at " in message
    assert message.endswith(
        f"[may be Triton's interpreter, not newcomer_rope:rope: {backend.interpreter_cast_problems()['bf16']}; judge "
        "bf16 on a GPU]"
    )


def test_a_plain_pytorch_implementation_gets_no_interpreter_caveat(tmp_path, monkeypatch) -> None:
    (tmp_path / "plain_rope.py").write_text(
        "from dsv41_rope.kernel import apply_rope_eager\n\n\ndef rope(values, angles, *, inverse=False):\n"
        "    return apply_rope_eager(values, angles, inverse=inverse)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backend, "interpreter_cast_problems", lambda: {"bf16": "casts wrongly"})
    assert not load("plain_rope:rope").runs_triton_kernels
    assert interpreter_caveat(load("plain_rope:rope"), "bf16") is None
    assert interpreter_caveat(load("dsv41_rope.kernel"), "bf16") is None, "the project's kernel casts exactly"


def test_the_verdict_counts_the_failed_tests_the_interpreter_may_explain() -> None:
    records = [
        CaseRecord(f"t.py::test[{dtype}]", "fused-vs-oracle", dtype, "failed", dtype, "interpreter", "cpu", 16, 1)
        for dtype in ("bf16", "fp32")
    ]
    artefacts = {FROM_TESTS: {INTERPRETER_ARTEFACTS: {"bf16": "may be Triton's interpreter, ..."}}}
    report = Report(cases={r.key: r for r in records}, metadata={**artefacts, TESTS_FAILED: 2})
    text = verdict(report)
    assert text.startswith("ulp-drift verdict: FAIL - 2 cases: ")
    assert "; 2 tests failed; 1 failed tests in bf16 may be Triton's interpreter, not the implementation" in text
