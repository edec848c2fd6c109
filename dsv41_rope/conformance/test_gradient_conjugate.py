"""Gradient by conjugate: the backward rotates the upstream gradient by the conjugate.

For upstream g, the autograd gradient equals the implementation applied to g with the opposite ``inverse`` (bit for
bit for the project's kernel, whose backward is that one fused pass; another implementation may take its backward from
autograd, whose zero-filled partial gradients normalize signed zeros and NaN payloads), does not depend on the values
(checked in the normal and special regimes),
and equals the eager backward (oracle on every backend, PyTorch on a GPU) except for the signed zeros and NaN payloads
that eager autograd normalizes when it adds its zero-filled partial gradients (``-0 + 0 = +0``); those are counted in
the report as allowed differences.
"""

import pytest

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import case_params


@pytest.mark.parametrize("case", case_params())
def test_gradient_is_conjugate_rotation(case, device, impl_under_test, ulp_drift):
    checks.gradient_is_conjugate_rotation(case, device, impl_under_test, ulp_drift)
