"""Generated layouts: every view the op can be handed gives the eager path's bits, not only the fixed matrix's four.

Hypothesis draws whole cases (``dsv41_rope.conformance.strategies``): values of rank 3 or 4 in any strided view (slices
with start and step on every dimension, permuted storage, size-1 dimensions with any stride, expanded batch or heads,
storage offsets), angle tables ``[P]``, ``[S or 1, P]`` or ``[B or 1, S or 1, P]`` in any view, non-contiguous and
expanded upstream gradients, every dtype, direction and value regime. Each case must match the oracle (and eager PyTorch
on a GPU) forward and backward, and leave its inputs untouched; the in-place op must give the same bits in place. They
judge the implementation under test (``--rope-impl``), and its in-place function where one is named. A failure shrinks
to a minimal layout and prints the code that rebuilds it.

Profiles (``--hypothesis-profile``, registered in ``dsv41_rope/conformance/conftest.py``): ``ci`` by default, ``gpu``
and ``thorough`` for more examples; see docs/conformance.md.
"""

import pytest

from dsv41_rope.conformance import generated_checks
from dsv41_rope.conformance.generated_shards import run_shard, shard_params


@pytest.mark.compile_bound
@pytest.mark.parametrize("shard", shard_params())
def test_out_of_place_op_matches_eager_on_generated_layouts(shard, device, impl_under_test, ulp_drift):
    run_shard(
        shard,
        lambda spec, drift: generated_checks.check_generated_case(spec, device, impl_under_test, drift),
        ulp_drift,
    )


@pytest.mark.compile_bound
@pytest.mark.parametrize("shard", shard_params())
def test_in_place_op_matches_eager_on_generated_layouts(shard, device, in_place_impl, ulp_drift):
    run_shard(
        shard,
        lambda spec, drift: generated_checks.check_generated_case(spec, device, in_place_impl, drift, in_place=True),
        ulp_drift,
    )
