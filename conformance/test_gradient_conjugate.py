"""Gradient by conjugate: the backward rotates the upstream gradient by the conjugate, in one fused pass.

For upstream g, the autograd gradient equals the fused op applied to g with the opposite ``inverse`` (bit for bit),
does not depend on the values, and equals the eager backward (oracle on every backend, PyTorch on a GPU) except for
the signed zeros and NaN payloads that eager autograd normalizes when it adds its zero-filled partial gradients
(``-0 + 0 = +0``); those are counted in the report as allowed differences.
"""

import pytest

from conformance import checks
from conformance.cases import case_params


@pytest.mark.parametrize("case", case_params())
def test_gradient_is_conjugate_rotation(case, device, rope, ulp_drift):
    checks.gradient_is_conjugate_rotation(case, device, rope, ulp_drift)
