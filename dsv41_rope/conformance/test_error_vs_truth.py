"""Error against the float64 truth: norm-wise within the documented bound per dtype, elementwise reported.

The norm-wise error is |y - t| over the ulp of the pair's magnitude; elementwise ulp error is unbounded near
cancellation (a rotated value close to 0 while its pair is not), so the report shows it without a bound. Special
values (NaN, inf) have no finite truth: the bit suites cover them.
"""

import pytest

from dsv41_rope.conformance import error_bound
from dsv41_rope.conformance.cases import FINITE_REGIMES, case_params


@pytest.mark.parametrize("case", case_params(FINITE_REGIMES))
def test_normwise_error_within_bound(case, device, impl_under_test, ulp_drift):
    error_bound.error_within_bound(case, device, impl_under_test, ulp_drift)
