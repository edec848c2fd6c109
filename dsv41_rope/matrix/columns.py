"""The matrix's columns, read from one peer's run of the suite: which tests each column counts, and its cell.

A cell is ``PASS`` (every test it counts passed), ``FAIL k/n`` (k of its n tests failed), ``n/a`` (no test of it ran,
or the peer has no such thing: a backward), or a norm-wise error in ulps. Tests are named as junit names them,
``dsv41_rope.conformance.test_forward_bits::test_fused_equals_oracle[bf16-4d-...-forward-normal]``; a column counts a
test by its function and its case id (dtype, direction, layout, regime, angle class read from the id), and, for the
NaN-payload and signed-zero columns, by what failed it (``metadata["failed_tests"]`` of the report).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "BIT_COLUMNS",
    "COLUMNS",
    "ERROR_COLUMNS",
    "Column",
    "TestName",
    "cells",
    "column_outcomes",
    "parse_test",
    "whats_of",
    "worst_normwise",
]

# The tests of each property (forward and inverse bits, backward, copied channels, generated layouts, bad input).
_FORWARD = ("test_fused_equals_oracle", "test_fused_equals_torch_eager", "test_forward_matches_its_reference")
_BACKWARD = ("test_gradient_is_conjugate_rotation", "test_backward_matches_its_reference")
_BITS = (*_FORWARD, *_BACKWARD, "test_copied_channels_are_bit_copies")
_GENERATED = ("test_out_of_place_op_matches_eager_on_generated_layouts",)
_BAD_INPUT = ("test_rejected_with_a_clear_error", "test_devices_must_match", "test_valid_call_does_not_write_inputs")
_LAYOUTS = ("-transposed-", "-padded-rows-", "-channel-strided-", "-per-batch-angles", "-angles-one-position")
_ANGLE_FORMS = ("-angles-sequence-by-pairs", "-angles-pairs-only")


@dataclasses.dataclass(frozen=True)
class TestName:
    """A test of the suite: its function and its parameter id (its case's id, or a generated shard's)."""

    function: str
    case: str

    def has(self, *words: str) -> bool:
        """Whether the case id holds any of ``words``."""
        return any(word in self.case for word in words)


def parse_test(nodeid: str) -> TestName:
    """A junit or pytest node id as a :class:`TestName`."""
    name = nodeid.rsplit("::", 1)[-1]
    function, _, parameter = name.partition("[")
    return TestName(function, parameter.removesuffix("]"))


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: its title, the tests it counts, and what failing means for it.

    Attributes:
        title: the table's header.
        counts: whether a test belongs to the column.
        failed_by: where given, a failed test counts as the column's failure only if what failed it (the report's
            ``what``) holds this text; otherwise every failure of a counted test does.
        backward: the column is about the backward: ``n/a`` for a peer without one.
    """

    title: str
    counts: Callable[[TestName], bool]
    failed_by: str | None = None
    backward: bool = False


def _direction(dtype: str, direction: str) -> Callable[[TestName], bool]:
    return lambda test: test.function in _FORWARD and test.case.startswith(f"{dtype}-") and test.has(f"-{direction}-")


BIT_COLUMNS = (
    Column("forward BF16", _direction("bf16", "forward")),
    Column("forward FP16", _direction("fp16", "forward")),
    Column("forward FP32", _direction("fp32", "forward")),
    Column("inverse", lambda test: test.function in _FORWARD and test.has("-inverse-")),
    Column("backward", lambda test: test.function in _BACKWARD, backward=True),
    Column("NaN payloads", lambda test: test.function in _BITS and test.has("-special"), "NaN bit-pattern"),
    Column("signed zeros", lambda test: test.function in _BITS and test.has("-special"), "signed-zero"),
    Column("subnormals", lambda test: test.function in _BITS and test.has("-tiny", "-subnormal-angles")),
    Column(
        "layouts",
        lambda test: test.function in _GENERATED or (test.function in _BITS and test.has(*_LAYOUTS, *_ANGLE_FORMS)),
    ),
    Column("bad input", lambda test: test.function in _BAD_INPUT),
)
COLUMNS = BIT_COLUMNS
ERROR_COLUMNS = ("bf16", "fp16", "fp32")


def column_outcomes(
    column: Column, tests: Mapping[str, str], whats: Mapping[TestName, str]
) -> tuple[list[str], list[str]]:
    """The node ids of the tests a column counts that ran (not skipped), and of those that failed it, in the run's
    order: every failed or erroring test it counts, or, for a column with ``failed_by``, those whose failure (the
    report's ``what``, by test) says that."""
    ran, failed = [], []
    for nodeid, outcome in tests.items():
        test = parse_test(nodeid)
        if not column.counts(test) or outcome == "skipped":
            continue
        ran.append(nodeid)
        if outcome in ("failed", "error") and (column.failed_by is None or column.failed_by in whats.get(test, "")):
            failed.append(nodeid)
    return ran, failed


def whats_of(failures: Mapping[str, Mapping[str, Any]]) -> dict[TestName, str]:
    """What failed each failed test, by test, from the report's ``failed_tests``."""
    return {parse_test(nodeid): entry.get("what", "") for nodeid, entry in failures.items()}


def cells(tests: Mapping[str, str], failures: Mapping[str, Mapping[str, Any]], *, has_backward: bool) -> dict[str, str]:
    """Each bit column's cell for one peer's run.

    Args:
        tests: every test's node id and outcome (passed, failed, error, skipped).
        failures: the report's ``failed_tests``, node id (the report's, a path) to ``{"what", "message"}``.
        has_backward: whether the peer has a backward.
    """
    whats = whats_of(failures)
    result = {}
    for column in BIT_COLUMNS:
        ran, failed = column_outcomes(column, tests, whats) if has_backward or not column.backward else ([], [])
        if not ran:
            result[column.title] = "n/a"
        else:
            result[column.title] = f"FAIL {len(failed)}/{len(ran)}" if failed else "PASS"
    return result


def worst_normwise(cases: Mapping[str, Mapping[str, Any]]) -> dict[str, float | None]:
    """The largest norm-wise error in ulps against the float64 truth, per dtype, over the report's error
    measurements (``fused-vs-truth``); None for a dtype with none."""
    worst: dict[str, float | None] = dict.fromkeys(ERROR_COLUMNS)
    for record in cases.values():
        if not re.search(r"(^|-)fused-vs-truth$", str(record.get("comparison", ""))):
            continue
        normwise = record.get("normwise") or {}
        value = normwise.get("max")
        dtype = record.get("dtype")
        if isinstance(value, int | float) and dtype in worst:
            current = worst[dtype]
            worst[dtype] = value if current is None else max(current, value)
    return worst
