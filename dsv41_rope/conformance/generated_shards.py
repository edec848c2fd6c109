"""Running generated cases: shards of the hypothesis search, and their records in the ulp-drift report.

The generated tests are parametrized over :data:`SHARDS`, dtype x rank x direction, each in :data:`PARTS` parts
drawing the profile's examples between them, so that pytest-xdist spreads them over its workers and no two shards
can draw the same case (each draws only its own part of the space). On a GPU every example builds its own kernels
(its strides are a new specialization), so a whole shard of the ``ci`` profile took up to 57 s, as long as the rest of
a worker's share of the suite; a part takes half. Under a derandomized profile (``ci``, ``gpu``) each part draws
from its own fixed seed, so every run tests the same examples; the node ids carry the profile's name, so that the
baseline's keys name the examples they stand for.

A hypothesis run calls the check once per example, but the report keeps one record per test and comparison:
:class:`DriftTally` adds each comparison up over the examples and records the totals when the run ends.

Hypothesis (since 6.131) also draws, now and then, integers that appear as literals in the source of whichever of
the repository's modules are imported ("local constants"). Examples of a fixed seed would then change with any edit
of the kernel or of the suite, and with what else a worker happened to import; the baselines record these examples,
so :func:`run_shard` draws without them (:func:`_without_local_constants`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import zlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import hypothesis
import hypothesis.internal.conjecture.providers as hypothesis_providers
import pytest

from dsv41_rope.conformance import strategies
from dsv41_rope.conformance.cases import DTYPES
from dsv41_rope.conformance.layouts import LayoutSpec
from dsv41_rope.harness import backend

__all__ = ["INTERPRETER_CI_FRACTION", "PARTS", "SHARDS", "DriftTally", "Shard", "run_shard", "shard_params"]

# Each dtype x rank x direction is drawn in this many parts, of 1/PARTS of the profile's examples each.
PARTS = 2
# Under the interpreter an example costs tens of ms of Python a kernel program, so the default profile (ci) draws
# this fraction of its examples there; the GPU, and the other profiles (gpu, thorough), draw them all.
INTERPRETER_CI_FRACTION = 0.25


@dataclasses.dataclass(frozen=True)
class Shard:
    """The part of the generated cases one test draws from: a dtype, a rank, a direction, and which of the
    :data:`PARTS` parts of their examples."""

    dtype_name: str
    rank: int
    inverse: bool
    part: int = 0

    @property
    def id(self) -> str:
        return f"{self.dtype_name}-{self.rank}d-{'inverse' if self.inverse else 'forward'}-part{self.part + 1}"

    @property
    def seed(self) -> int:
        """The shard's own seed under derandomized profiles (from its id, never from Python's string hash)."""
        return zlib.crc32(self.id.encode())


SHARDS = tuple(
    Shard(dtype_name, rank, inverse, part)
    for dtype_name in DTYPES
    for rank in (3, 4)
    for inverse in (False, True)
    for part in range(PARTS)
)


def shard_params() -> list:
    """``pytest.param`` per shard, with ids ``<profile>-<dtype>-<rank>d-<direction>-part<n>``
    (``ci-bf16-4d-inverse-part1``)."""
    profile = hypothesis.settings.get_current_profile_name()
    return [pytest.param(shard, id=f"{profile}-{shard.id}") for shard in SHARDS]


class DriftTally:
    """Stands in for the ``ulp_drift`` fixture during a hypothesis run: adds each comparison up over the examples
    (elements and difference counts summed, the largest bit distance, the first mismatch's detail), then records
    one entry per comparison."""

    _SAME_IN_EVERY_EXAMPLE = ("dtype", "backend", "device", "allowed")

    def __init__(self) -> None:
        self._totals: dict[str, dict[str, Any]] = {}
        self._examples: dict[str, int] = {}
        self._metadata: list[tuple[str, Any]] = []

    def add_run_metadata(self, key: str, value: Any) -> None:
        """Keeps run-level metadata (``ulp_drift.add_run_metadata``) until :meth:`flush`."""
        if (key, value) not in self._metadata:
            self._metadata.append((key, value))

    def record(self, *, comparison: str, detail: str = "", **fields: Any) -> None:
        """Adds one example's comparison (the keyword arguments of ``ulp_drift.record``)."""
        total = self._totals.get(comparison)
        self._examples[comparison] = self._examples.get(comparison, 0) + 1
        if total is None:
            self._totals[comparison] = {"comparison": comparison, "detail": detail, **fields}
            return
        for name in self._SAME_IN_EVERY_EXAMPLE:
            if total.get(name) != fields.get(name):
                raise ValueError(f"{comparison}: {name} {fields.get(name)!r} differs from {total.get(name)!r}")
        for name in ("elements", "mismatches", "nan_bit_differences", "signed_zero_differences"):
            total[name] = total.get(name, 0) + fields.get(name, 0)
        total["max_distance"] = max(total.get("max_distance", 0), fields.get("max_distance", 0))
        total["detail"] = total["detail"] or detail

    def flush(self, ulp_drift) -> None:
        """Records the totals in the ulp-drift report (nothing without the fixture)."""
        if ulp_drift is None:
            return
        for key, value in self._metadata:
            ulp_drift.add_run_metadata(key, value)
        for comparison, total in self._totals.items():
            examples = f"{self._examples[comparison]} generated examples"
            detail = f"{examples}; first mismatch {total['detail']}" if total["detail"] else examples
            ulp_drift.record(**{**total, "detail": detail})


def run_shard(shard: Shard, check: Callable[[LayoutSpec, DriftTally], None], ulp_drift) -> None:
    """Run ``check(spec, tally)`` on the shard's examples (its part of the loaded hypothesis profile's), then record.

    Hypothesis shrinks a failure to a minimal spec and raises its error, which ends with the code that rebuilds the
    inputs. The records add up every example the run made, shrinking included.
    """
    tally = DriftTally()

    @hypothesis.given(spec=strategies.layout_specs(shard.dtype_name, shard.rank, shard.inverse))
    def generated_case(spec: LayoutSpec) -> None:
        check(spec, tally)

    examples = max(1, hypothesis.settings.default.max_examples // PARTS)
    if backend.name() == "interpreter" and hypothesis.settings.get_current_profile_name() == "ci":
        examples = max(1, int(examples * INTERPRETER_CI_FRACTION))
    generated_case = hypothesis.settings(hypothesis.settings.default, max_examples=examples)(generated_case)
    if hypothesis.settings.default.derandomize:
        generated_case = hypothesis.seed(shard.seed)(generated_case)
    try:
        with _without_local_constants():
            generated_case()
    finally:
        tally.flush(ulp_drift)


@contextlib.contextmanager
def _without_local_constants() -> Iterator[None]:
    """Draw as if the repository's modules held no literals (see the module docstring).

    This reaches into hypothesis's provider (the version is pinned in ./run and tox.ini); a test draws a shard with
    and without new literals in an imported module and requires the same examples.
    """
    if not hasattr(hypothesis_providers, "_get_local_constants"):
        raise RuntimeError(
            f"hypothesis {hypothesis.__version__} draws local constants differently: update _without_local_constants"
        )
    none = hypothesis_providers.Constants()
    hypothesis_providers.CONSTANTS_CACHE.cache.clear()  # it holds the local constants already seen
    try:
        with mock.patch.object(hypothesis_providers, "_get_local_constants", lambda: none):
            yield
    finally:
        hypothesis_providers.CONSTANTS_CACHE.cache.clear()
