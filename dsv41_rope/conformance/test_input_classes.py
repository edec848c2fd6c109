"""Every input class the API accepts, in every dtype and direction, forward and backward, each held to its reference.

The case matrix hands the implementation float32 RoPE angles ``[1 or B, S, P]``; here the other classes are judged
the same way: float64 angles (eager then computes in complex128), angles that need a gradient, and every broadcast
form of the angles (over the sequence, ``[S, P]`` and ``[P]`` for 3-D values); and the value classes where rounding
and cos/sin meet their edges: exact ties of the final rounding, and subnormal angles. Each computation is held to the
eager path of the device it runs on (``dsv41_rope.conformance.references``): the project's kernel, for one, runs its
fused kernel on some and falls back to the eager path on others. docs/conformance.md ("Coverage") tabulates the
cells; ``tests/test_coverage_table.py`` holds this file and the matrix to that table.
"""

import pytest

from dsv41_rope.conformance import checks, error_bound
from dsv41_rope.conformance.cases import input_class_params


@pytest.mark.parametrize("case", input_class_params())
def test_forward_matches_its_reference(case, device, impl_under_test, ulp_drift):
    checks.forward_matches_reference(case, device, impl_under_test, ulp_drift)


@pytest.mark.parametrize("case", input_class_params())
def test_backward_matches_its_reference(case, device, impl_under_test, ulp_drift):
    checks.gradient_is_conjugate_rotation(case, device, impl_under_test, ulp_drift)


@pytest.mark.parametrize("case", input_class_params())
def test_in_place_matches_its_reference(case, device, in_place_impl, ulp_drift):
    checks.in_place_matches(case, device, in_place_impl, ulp_drift)


# The truth takes float32 angles (the float32 angle is what it rotates by exactly).
@pytest.mark.parametrize("case", input_class_params(finite=True, float32_angles=True))
def test_normwise_error_within_bound(case, device, impl_under_test, ulp_drift):
    error_bound.error_within_bound(case, device, impl_under_test, ulp_drift)
