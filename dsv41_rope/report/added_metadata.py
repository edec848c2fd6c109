"""Run-level metadata that the tests add (`dsv41_rope.report.pytest_hooks.add_run_metadata`): its place, its values,
its merging.

A value may come from the controller, from each xdist worker and from each shard of a merged run, so values of one
key merge by a rule that gives the same result in any order and any grouping:

- dicts merge key by key (each worker can add, say, one entry per device), by the same rule;
- otherwise equal values collapse to one, and different values become the sorted list of them. A list therefore
  stands for several values: merging ``"a"`` with ``["a", "b"]`` gives ``["a", "b"]``, and a list of one value is that
  value.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from dsv41_rope.report.model import encode_non_finite, plain

__all__ = [
    "FROM_TESTS",
    "IMPLEMENTATION",
    "INTERPRETER_ARTEFACTS",
    "CPU_VERDICT",
    "REFERENCES",
    "checked_value",
    "merge_added",
    "merge_values",
]

# Where the added metadata lives in a report: ``metadata["from_tests"][key]``.
FROM_TESTS = "from_tests"
# The key under which the suite records the implementation it judged (``dsv41_rope/conformance/conftest.py``); reports
# of different implementations do not merge (`dsv41_rope.report.merge`).
IMPLEMENTATION = "implementation under test"
# The key under which the suite records, per dtype, what Triton's interpreter casts wrongly, when the implementation
# judged runs Triton kernels under it (``dsv41_rope/conformance/conftest.py``): the verdict counts the failures it may
# explain.
INTERPRETER_ARTEFACTS = "interpreter artefacts"
# The key under which the suite's checks record the references they held the implementation's computations to, name:
# description (``dsv41_rope/conformance/references.py``): the verdict names them.
REFERENCES = "references"
# The key under which the suite says that its references were a CPU's, and what to run on a GPU: the verdict ends so.
CPU_VERDICT = "cpu verdict"


def checked_value(value: Any) -> Any:
    """Returns `value` as plain JSON data (numpy/torch scalars become numbers, tuples lists, dict keys strings).

    Raises:
        TypeError: when the value holds something JSON cannot (an object, a set).
    """
    if isinstance(value, set | frozenset):
        raise TypeError(f"run metadata must be JSON-able; a set is not (use a list): {value!r}")
    data = plain(value)
    json.dumps(encode_non_finite(data), allow_nan=False)
    return data


def merge_values(values: Iterable[Any]) -> Any:
    """Merges the values of one key by the module's rule; see the module docstring.

    Args:
        values: one or more values, plain JSON data.
    """
    values = list(values)
    if values and all(isinstance(value, Mapping) for value in values):
        keys = sorted({key for value in values for key in value})
        return {key: merge_values([value[key] for value in values if key in value]) for key in keys}
    distinct: dict[str, Any] = {}
    for value in values:
        for one in value if isinstance(value, list) else [value]:
            distinct.setdefault(_canonical(one), one)
    if len(distinct) == 1:
        return next(iter(distinct.values()))
    return sorted(distinct.values(), key=_order)


def merge_added(metadata: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Merges several ``{key: value}`` dicts of added metadata (a worker's, a shard's) into one, key by key."""
    return merge_values([{}, *metadata])


def _canonical(value: Any) -> str:
    return json.dumps(encode_non_finite(value), sort_keys=True)


def _order(value: Any) -> tuple[int, Any]:
    # Numbers by value and strings alphabetically; other kinds after them, by their JSON text.
    if value is None:
        return (0, 0)
    if isinstance(value, bool):
        return (1, value)
    if isinstance(value, int | float) and not math.isnan(value):
        return (2, value)
    if isinstance(value, str):
        return (3, value)
    return (4, _canonical(value))
