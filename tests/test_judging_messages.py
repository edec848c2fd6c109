"""What the suite says when it judges an implementation it did not write: every kind of difference with its first
position, input bits, got and expected; what eager raised for an input the implementation accepted; and a function
that cannot be called as ``fn(values, angles, inverse=...)`` is not taken for one that rejects bad input.
"""

from __future__ import annotations

import pytest
import torch

from conformance import checks
from conformance.cases import Case
from conformance.comparisons import assert_bits
from conformance.failures import ConformanceFailure
from conformance.implementation import load

CPU = torch.device("cpu")
CASE = Case("bf16", "pairs1", "contiguous", False, "normal")


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
    with pytest.raises(AssertionError) as failure:
        checks.rejects_what_eager_rejects(load("accepting_rope:rope"), values, zero_pairs, False)
    message = str(failure.value)
    assert message.startswith("accepting_rope:rope accepted an input eager rejects (eager raised ")
    assert str(checks.raised_by(checks.eager_reference, values, zero_pairs, False)) in message


def test_a_function_without_inverse_rejects_nothing(tmp_path, monkeypatch) -> None:
    (tmp_path / "positional_rope.py").write_text("def rope(values, angles):\n    return values\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    values, zero_pairs = torch.ones(1, 4, 2, 16, dtype=torch.bfloat16), torch.zeros(1, 4, 0)
    implementation = load("positional_rope:rope")
    assert isinstance(checks.raised_by(implementation.forward, values, zero_pairs, False), TypeError)
    with pytest.raises(AssertionError, match=r"positional_rope:rope cannot be called as the suite calls it: .*inverse"):
        checks.rejects_what_eager_rejects(implementation, values, zero_pairs, False)
