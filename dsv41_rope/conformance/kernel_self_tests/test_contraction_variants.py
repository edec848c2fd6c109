"""Every contraction variant, forced in turn, gives the oracle's bits in that variant: forward, inverse, backward.

The default variant (calibrated on a GPU, the H200's under the interpreter) runs the whole case matrix in the other
suites; here ``DSV41_ROPE_CONTRACTION`` forces each of the nine ``<real>/<imag>`` variants on a slice of it, so that a
device calibrating to any of them runs a kernel already proven, within the norm-wise error bound of its variant. On
CUDA the products a variant rounds must stay rounded although Triton's default fp-fusion contracts a plain
``a * b + c``: a variant the compiler contracted would equal ``first`` or ``second`` and fail here.
"""

from __future__ import annotations

import itertools

import pytest

from dsv41_rope.conformance import checks, error_bound
from dsv41_rope.conformance.cases import Case
from dsv41_rope.oracle.eager import CONTRACTIONS

VARIANTS = list(itertools.product(CONTRACTIONS, repeat=2))
# Every dtype and direction, odd channels, per-batch angles, transposed and padded layouts, special and tiny values.
SLICE = [
    Case("bf16", "query", "contiguous", False, "normal", small=True),
    Case("fp32", "batch3", "transposed", True, "normal", per_batch_angles=True, small=True),
    Case("fp16", "odd-channels", "padded-rows", False, "special", small=True),
    Case("fp32", "window-kv", "contiguous", True, "tiny", small=True),
]


@pytest.mark.compile_bound  # each forced variant is a kernel of its own
@pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in SLICE])
@pytest.mark.parametrize("contraction", VARIANTS, ids="/".join)
def test_forced_variant_matches_the_oracle_in_that_variant(case, contraction, device, rope, ulp_drift, monkeypatch):
    monkeypatch.setenv(rope.CONTRACTION_VARIABLE, "/".join(contraction))
    assert rope.settings(device).contraction == contraction
    checks.forward_matches_reference(case, device, rope, ulp_drift, prefix="variant-", eager_on_gpu=False)
    checks.gradient_is_conjugate_rotation(case, device, rope, ulp_drift, prefix="variant-", compare_eager=False)
    if case.regime != "special":  # NaN and inf have no finite truth
        error_bound.error_within_bound(case, device, rope, ulp_drift, prefix="variant-")
