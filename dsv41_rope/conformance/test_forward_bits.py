"""Forward and inverse bits: the implementation under test equals the eager CUDA path bit for bit.

On every backend it equals the oracle's CPU reproduction of CUDA eager (fed the device's own cos/sin); on a GPU it
also equals PyTorch's eager path itself, every element, and the oracle is proven against that eager path, forward and
backward. NaN payloads and signed zeros must match too.
"""

import pytest

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import case_params


@pytest.mark.parametrize("case", case_params())
def test_fused_equals_oracle(case, device, impl_under_test, ulp_drift):
    checks.forward_matches_reference(case, device, impl_under_test, ulp_drift, eager_on_gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("case", case_params())
def test_fused_equals_torch_eager(case, gpu, impl_under_test, ulp_drift):
    checks.forward_matches_eager(case, gpu, impl_under_test, ulp_drift)


@pytest.mark.gpu
@pytest.mark.parametrize("case", case_params())
def test_oracle_equals_torch_eager(case, gpu, ulp_drift):
    checks.oracle_matches_eager(case, gpu, ulp_drift)
