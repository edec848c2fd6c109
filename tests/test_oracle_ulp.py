"""Ulp distance, bit comparison and error statistics on hand-picked cases."""

import json
import math

import numpy as np
import pytest
import torch

from dsv41_rope.oracle import ulp
from dsv41_rope.oracle.rounding import INTEGER_VIEW, SUPPORTED_DTYPES
from dsv41_rope.oracle.ulp import (
    HISTOGRAM_EDGES,
    INFINITE_DISTANCE,
    compare_bits,
    distance,
    error,
    histogram,
    normwise_error,
    summarize,
)


def _from_bits(bits: list[int], dtype: torch.dtype) -> torch.Tensor:
    width = 32 if dtype == torch.float32 else 16
    signed = [b - (1 << width) if b >= 1 << (width - 1) else b for b in bits]
    return torch.tensor(signed, dtype=INTEGER_VIEW[dtype]).view(dtype)


def _finfo_bits(dtype: torch.dtype) -> dict[str, int]:
    if dtype == torch.float32:
        return {"max": 0x7F7FFFFF, "inf": 0x7F800000, "min_normal": 0x00800000, "sign": 0x80000000, "nan": 0x7FC00000}
    exponent_all_ones = 0x7F80 if dtype == torch.bfloat16 else 0x7C00
    min_normal = 0x0080 if dtype == torch.bfloat16 else 0x0400
    return {
        "max": exponent_all_ones - 1,
        "inf": exponent_all_ones,
        "min_normal": min_normal,
        "sign": 0x8000,
        "nan": exponent_all_ones | (min_normal >> 1),
    }


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_distance_hand_picked(dtype):
    f = _finfo_bits(dtype)
    one_bits = {torch.bfloat16: 0x3F80, torch.float16: 0x3C00, torch.float32: 0x3F800000}[dtype]
    cases = [
        (0, f["sign"], 0),  # +0 vs -0
        (1, f["sign"] | 1, 2),  # smallest subnormals of opposite signs
        (0, 1, 1),
        (f["min_normal"] - 1, f["min_normal"], 1),  # largest subnormal to smallest normal
        (one_bits - 1, one_bits, 1),  # across the binade boundary below 1
        (one_bits - 1, one_bits + 1, 2),
        (f["max"], f["inf"], 1),
        (f["inf"], f["sign"] | f["inf"], 2 * f["inf"]),
        (f["nan"], f["nan"] | 1, 0),
        (f["nan"], f["sign"] | f["nan"], 0),
        (f["nan"], one_bits, INFINITE_DISTANCE),
        (0, f["nan"], INFINITE_DISTANCE),
    ]
    a = _from_bits([case[0] for case in cases], dtype)
    b = _from_bits([case[1] for case in cases], dtype)
    result = distance(a, b)
    assert result.dtype == torch.int64
    assert result.tolist() == [case[2] for case in cases]
    assert distance(b, a).tolist() == result.tolist()


def test_distance_extreme_float32_has_no_overflow():
    a = torch.tensor([-3.4028235e38, -math.inf], dtype=torch.float32)
    b = torch.tensor([3.4028235e38, math.inf], dtype=torch.float32)
    assert distance(a, b).tolist() == [2 * 0x7F7FFFFF, 2 * 0x7F800000]


def test_distance_keeps_shape_and_rejects_mismatches():
    a = torch.zeros(2, 3, dtype=torch.bfloat16)
    assert distance(a, a.t().contiguous().t()).shape == (2, 3)
    with pytest.raises(ValueError, match="dtype and shape"):
        distance(a, torch.zeros(2, 3, dtype=torch.float16))
    with pytest.raises(ValueError, match="dtype and shape"):
        distance(a, torch.zeros(3, 2, dtype=torch.bfloat16))
    with pytest.raises(TypeError):
        distance(torch.zeros(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64))


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_compare_bits_classifies_differences(dtype):
    f = _finfo_bits(dtype)
    one_bits = {torch.bfloat16: 0x3F80, torch.float16: 0x3C00, torch.float32: 0x3F800000}[dtype]
    expected = [one_bits, 0, f["nan"], one_bits, 5, f["nan"], one_bits + 7, 0]
    actual = [one_bits, f["sign"], f["nan"] | 3, one_bits + 2, 5, one_bits, one_bits + 4, 0]
    result = compare_bits(_from_bits(actual, dtype), _from_bits(expected, dtype))
    assert result.elements == 8
    assert result.signed_zero_differences == 1
    assert result.nan_bit_differences == 1
    assert result.mismatches == 3
    assert result.first_mismatch_index == 3
    assert result.max_distance == INFINITE_DISTANCE
    # Each kind says where it first occurs, so that a failure can show its bits.
    assert (result.first_signed_zero_index, result.first_nan_bit_index) == (1, 2)


def test_compare_bits_max_distance_and_clean_run():
    expected = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    actual = expected.clone()
    clean = compare_bits(actual, expected)
    assert (clean.mismatches, clean.max_distance, clean.first_mismatch_index) == (0, 0, None)
    assert (clean.first_nan_bit_index, clean.first_signed_zero_index) == (None, None)
    actual.view(torch.int32)[1, 0] += 5
    actual.view(torch.int32)[0, 1] -= 2
    result = compare_bits(actual.t().contiguous().t(), expected)
    assert (result.mismatches, result.max_distance, result.first_mismatch_index) == (2, 5, 1)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
def test_compare_bits_finds_the_largest_distance_and_a_nan_in_any_chunk(dtype, monkeypatch):
    """The largest distance is taken chunk by chunk on the tensors' device: it must equal :func:`distance`'s maximum
    wherever the largest gap, or a NaN against a number, lies (here chunks of 4 elements)."""
    monkeypatch.setattr(ulp, "_DISTANCE_CHUNK", 4)
    generator = torch.Generator().manual_seed(5)
    expected = torch.randn(23, generator=generator).to(dtype)
    actual = expected.clone()
    integer = actual.view(INTEGER_VIEW[dtype])
    integer[[1, 6, 13, 22]] += torch.tensor([1, 3, 9, 2], dtype=integer.dtype)  # the largest, 9, in the 4th chunk
    result = compare_bits(actual, expected)
    assert (result.mismatches, result.first_mismatch_index) == (4, 1)
    assert result.max_distance == int(distance(actual, expected).max()) == 9
    actual[21] = float("nan")
    assert compare_bits(actual, expected).max_distance == INFINITE_DISTANCE


@pytest.mark.parametrize(
    ("dtype", "x", "truth", "expected"),
    [
        (torch.bfloat16, 1.0, 1.0 + 2.0**-8, 0.5),  # a tie, correctly rounded
        (torch.bfloat16, 1.0, 1.0 + 2.0**-7, 1.0),
        (torch.bfloat16, 1.0, 1.0 - 2.0**-30, 2.0**-30 / 2.0**-8),  # the ulp below the binade boundary is 2^-8
        (torch.bfloat16, 1.0 - 2.0**-8, 1.0 - 2.0**-9, 0.5),
        (torch.float16, 2.0**-24, 0.0, 1.0),  # smallest subnormal against exact zero
        (torch.float16, 2.0**-24, 1.5 * 2.0**-24, 0.5),
        (torch.float16, 2.0**-14, 2.0**-14 + 2.0**-25, 0.5),  # ulp at the smallest normal is the subnormal ulp
        (torch.float32, 2.0**-149, 2.0**-150, 0.5),
        (torch.float32, 3.0, 3.0, 0.0),
        (torch.float32, -0.0, 0.0, 0.0),
        (torch.float32, math.inf, math.inf, 0.0),
        (torch.float32, -math.inf, -math.inf, 0.0),
        (torch.float32, math.inf, 3.5e38, 0.5),  # a correctly rounded overflow
        (torch.float32, math.inf, 3.4028235e38, math.inf),  # finite truth below the overflow threshold
        (torch.float32, math.inf, -3.5e38, math.inf),
        (torch.float32, 1.0, math.inf, math.inf),
        (torch.float16, math.inf, 65520.0, 0.5),
        (torch.float16, math.nan, math.nan, 0.0),
        (torch.float16, math.nan, 1.0, math.inf),
        (torch.float16, 1.0, math.nan, math.inf),
        (torch.float16, 65504.0, 70000.0, (70000.0 - 65504.0) / 64.0),  # beyond the range the ulp keeps growing
    ],
)
def test_error_hand_picked(dtype, x, truth, expected):
    result = error(torch.tensor([x], dtype=dtype), torch.tensor([truth], dtype=torch.float64))
    assert result.dtype == torch.float64
    assert result.item() == pytest.approx(expected, rel=1e-12)


def test_error_rejects_bad_truth():
    with pytest.raises(TypeError, match="float64"):
        error(torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError, match="same shape"):
        error(torch.ones(2), torch.ones(3, dtype=torch.float64))


def test_normwise_error_bounded_where_elementwise_is_not():
    # The second component cancels to ~1e-10; bfloat16 rounds it to a value with a large relative error.
    truth = torch.tensor([[1.0, 1.0e-10]], dtype=torch.float64)
    x = torch.tensor([[1.0, 1.0e-10]], dtype=torch.bfloat16)
    wrong_sign = torch.tensor([[1.0, -1.0e-10]], dtype=torch.bfloat16)
    assert error(wrong_sign, truth)[0, 1] > 100
    assert normwise_error(wrong_sign, truth)[0, 1] < 1e-6
    assert normwise_error(x, truth)[0, 0] == 0.0


def test_normwise_error_uses_the_pair_magnitude():
    truth = torch.tensor([3.0, 4.0 + 2.0**-6, 0.0, 0.0, 0.0, 0.0, math.nan, 1.0], dtype=torch.float64)
    x = torch.tensor([3.0, 4.0 + 2.0**-5, 0.0, -0.0, 2.0**-133, 0.0, math.nan, 1.0], dtype=torch.bfloat16)
    result = normwise_error(x, truth).tolist()
    # |(3, 4 + 2^-6)| ~ 5.01 lies in [4, 8), where the bfloat16 ulp is 2^-5.
    assert result[:2] == [0.0, 0.5]
    assert result[2:6] == [0.0, 0.0, math.inf, 0.0]
    assert result[6] == 0.0


def test_normwise_error_needs_pairs():
    with pytest.raises(ValueError, match="pairs"):
        normwise_error(torch.ones(3), torch.ones(3, dtype=torch.float64))


def test_histogram_edges_and_buckets():
    assert HISTOGRAM_EDGES[:4] == (0.0, 0.5, 1.0, 2.0)
    assert HISTOGRAM_EDGES[-2:] == (2.0**20, math.inf)
    errors = np.array([0.0, 0.25, 0.5, 0.75, 1.0, 3.0, 2.0**20, 2.0**21, math.inf])
    counts = histogram(errors)
    assert len(counts) == len(HISTOGRAM_EDGES)
    assert counts[:5] == [1, 2, 2, 0, 1]
    assert counts[-2:] == [1, 2]
    assert sum(counts) == errors.size


def test_histograms_merge_by_summing():
    rng = np.random.default_rng(3)
    first, second = rng.exponential(2.0, 1000), rng.exponential(50.0, 500)
    merged = [a + b for a, b in zip(histogram(first), histogram(second), strict=True)]
    assert merged == histogram(np.concatenate([first, second]))


def test_histogram_rejects_nan_and_negative():
    with pytest.raises(ValueError):
        histogram(np.array([math.nan]))
    with pytest.raises(ValueError):
        histogram(np.array([-1.0]))


def test_summarize_is_plain_json():
    errors = torch.tensor([0.0, 0.5, 0.25, 1.5] * 25 + [math.inf], dtype=torch.float64)
    summary = summarize(errors)
    assert set(summary) == {"max", "mean", "p99", "histogram", "correctly_rounded_fraction", "count"}
    assert summary["count"] == 101
    assert summary["max"] == math.inf and summary["mean"] == math.inf
    assert summary["p99"] == 1.5
    assert summary["correctly_rounded_fraction"] == pytest.approx(75 / 101)
    assert json.loads(json.dumps(summary)) == summary
    assert all(type(v) in (int, float, list) for v in summary.values())


def test_summarize_empty():
    summary = summarize(np.array([]))
    assert summary["count"] == 0 and summary["max"] is None and sum(summary["histogram"]) == 0
