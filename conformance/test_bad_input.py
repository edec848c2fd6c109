"""Bad input: every input the eager path rejects (or handles only by accident of slicing) gets a clear
``TypeError``/``ValueError`` that names the shapes, dtypes or devices involved, and nothing is written in place."""

from __future__ import annotations

import pytest
import torch


def _values(shape=(1, 4, 2, 16), dtype=torch.bfloat16):
    return torch.randn(shape, generator=torch.Generator().manual_seed(1)).to(dtype)


def _angles(shape=(1, 4, 4), dtype=torch.float32):
    return torch.rand(shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)


BAD_INPUTS = [
    # label, values, angles, inverse, error type, words the message must contain
    ("zero-pairs", _values(), _angles((1, 4, 0)), False, ValueError, ["pairs=0", "(1, 4, 2, 16)"]),
    ("too-many-pairs", _values(), _angles((1, 4, 9)), False, ValueError, ["pairs=9", "(1, 4, 2, 16)"]),
    ("values-2d", _values((4, 16)), _angles((4, 4)), False, ValueError, ["(4, 16)"]),
    ("values-5d", _values((1, 4, 2, 2, 16)), _angles(), False, ValueError, ["(1, 4, 2, 2, 16)"]),
    ("integer-values", torch.ones((1, 4, 16), dtype=torch.int32), _angles(), False, TypeError, ["int32"]),
    ("fp16-angles", _values(), _angles(dtype=torch.float16), False, TypeError, ["float16", "(1, 4, 4)"]),
    ("integer-angles", _values(), torch.ones((1, 4, 4), dtype=torch.int64), False, TypeError, ["int64"]),
    ("angles-sequence-mismatch", _values(), _angles((1, 5, 4)), False, ValueError, ["(1, 5, 4)", "(1, 4, 2, 16)"]),
    ("angles-batch-enlarges-values", _values(), _angles((2, 4, 4)), False, ValueError, ["(2, 4, 4)"]),
    ("angles-1d-for-4d-values", _values(), _angles((4,)), False, ValueError, ["(4,)"]),
    ("angles-scalar", _values(), torch.tensor(1.0), False, ValueError, ["()"]),
    ("inverse-not-bool", _values(), _angles(), 1, TypeError, ["inverse", "int"]),
    ("values-not-tensor", [[1.0]], _angles(), False, TypeError, ["list"]),
]


@pytest.mark.parametrize(
    ("values", "angles", "inverse", "error", "words"),
    [pytest.param(*row[1:], id=row[0]) for row in BAD_INPUTS],
)
def test_rejected_with_a_clear_error(rope, values, angles, inverse, error, words):
    before = [t.clone() for t in (values, angles) if isinstance(t, torch.Tensor)]
    with pytest.raises(error) as raised:
        rope.apply_rope_triton(values, angles, inverse)
    message = str(raised.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    after = [t for t in (values, angles) if isinstance(t, torch.Tensor)]
    for old, new in zip(before, after, strict=True):
        assert torch.equal(old.reshape(-1).view(torch.uint8), new.reshape(-1).view(torch.uint8))


def test_devices_must_match(rope):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to put the two inputs on different devices")
    with pytest.raises(ValueError, match="one device"):
        rope.apply_rope_triton(_values().cuda(), _angles())


@pytest.mark.parametrize("label", ["values-require-grad", "plain"])
def test_valid_call_does_not_write_inputs(rope, device, label):
    values = _values().to(device).requires_grad_(label == "values-require-grad")
    angles = _angles().to(device)
    values_before, angles_before = values.detach().clone(), angles.clone()
    rope.apply_rope_triton(values, angles, True)
    assert torch.equal(values.detach().view(torch.int16), values_before.view(torch.int16))
    assert torch.equal(angles.view(torch.int32), angles_before.view(torch.int32))
