"""Bad input: every input the eager path rejects (or handles only by accident of slicing) gets a clear
``TypeError``/``ValueError`` from the project's kernel that names the shapes, dtypes or devices involved, and nothing
is written in place.

The words of those messages are the project kernel's own contract. Another implementation must raise some exception
wherever the eager path itself raises on the same inputs on this machine: each row asks eager at run time
(``dsv41_rope.conformance.rejections``), since what eager accepts changes with torch (torch 2.14's ``torch.polar``
takes FP16 angles on a CPU). Where eager computes something, any answer will do. It must never write its inputs. A
``TypeError`` that says the function cannot be called as ``fn(values, angles, inverse=...)`` at all rejects nothing:
it fails the test too.
"""

from __future__ import annotations

import pytest
import torch

from dsv41_rope.conformance import rejections
from dsv41_rope.oracle.rounding import bits


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
BAD_INPUT_PARAMS = [pytest.param(*row[1:], id=row[0]) for row in BAD_INPUTS]
BAD_INPUT_NAMES = ("values", "angles", "inverse", "error", "words")


def _on(device, *inputs):
    """The inputs on the device the suite runs on (tensors moved, anything else as it is)."""
    return [item.to(device) if isinstance(item, torch.Tensor) else item for item in inputs]


def _bits_of(*inputs) -> list[torch.Tensor]:
    return [t.detach().clone().reshape(-1).view(torch.uint8) for t in inputs if isinstance(t, torch.Tensor)]


# torch.polar of FP16 angles warns that ComplexHalf is experimental where it computes them: the warning is the
# reference's, not the judged implementation's, and would read as if it came from the user's code.
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental:UserWarning")
@pytest.mark.parametrize(BAD_INPUT_NAMES, BAD_INPUT_PARAMS)
def test_rejected_with_a_clear_error(impl_under_test, device, values, angles, inverse, error, words):
    values, angles = _on(device, values, angles)
    before = _bits_of(values, angles)
    if impl_under_test.is_project_kernel:
        with pytest.raises(error) as raised:
            impl_under_test.forward(values, angles, inverse)
        message = str(raised.value)
        for word in words:
            assert word in message, f"{word!r} not in {message!r}"
    else:
        rejections.rejects_what_eager_rejects(impl_under_test, values, angles, inverse)
    for old, new in zip(before, _bits_of(values, angles), strict=True):
        assert torch.equal(old, new), f"{impl_under_test.name} wrote an input"


def test_devices_must_match(impl_under_test):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device to put the two inputs on different devices")
    if impl_under_test.is_project_kernel:
        with pytest.raises(ValueError, match="one device"):
            impl_under_test.forward(_values().cuda(), _angles())
    else:
        rejections.rejects_what_eager_rejects(impl_under_test, _values().cuda(), _angles(), False)


@pytest.mark.parametrize("label", ["values-require-grad", "plain"])
def test_valid_call_does_not_write_inputs(impl_under_test, device, label):
    values = _values().to(device).requires_grad_(label == "values-require-grad")
    angles = _angles().to(device)
    values_before, angles_before = values.detach().clone(), angles.clone()
    impl_under_test.forward(values, angles, True)
    assert torch.equal(bits(values), bits(values_before))
    assert torch.equal(bits(angles), bits(angles_before))
