"""The coverage table of docs/conformance.md ("Coverage") holds: every input class it lists meets every dtype and every
direction, forward, inverse and the backward of each, in the fixed cases of the tests that judge them, on a GPU (the
whole matrix) and on a CPU (the interpreter's cover of it), and the table lists every input class the cases have."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dsv41_rope.conformance import test_forward_bits, test_gradient_conjugate, test_input_classes
from dsv41_rope.conformance.cases import (
    ANGLE_CLASSES,
    DTYPES,
    REGIMES,
    SHAPES,
    Case,
    all_cases,
    in_interpreter_cover,
    input_class_cases,
    runs_here,
)

REPO = Path(__file__).resolve().parents[1]
# What each row of the table stands for, by the key in its first cell.
ROWS: dict[str, Callable[[Case], bool]] = {
    "rope": lambda case: case.angles == "rope" and not case.per_batch_angles,
    "per-batch": lambda case: case.angles == "rope" and case.per_batch_angles,
    **{name: (lambda case, name=name: case.angles == name) for name in ANGLE_CLASSES if name != "rope"},
    **{
        layout: (lambda case, layout=layout: case.layout == layout)
        for shape in SHAPES.values()
        for layout in shape.layouts
    },
    "ties": lambda case: case.regime == "ties",
    "subnormal-angles": lambda case: case.regime == "subnormal-angles",
    "special": lambda case: case.regime == "special",
    "tiny": lambda case: case.regime == "tiny",
}
# The tests that judge the fixed cases: forward and inverse bits, and the backward, each over the matrix (as this
# backend runs it) or over the input-class cases.
JUDGES = {
    "forward and inverse": (
        test_forward_bits.test_fused_equals_oracle,
        test_input_classes.test_forward_matches_its_reference,
    ),
    "backward": (
        test_gradient_conjugate.test_gradient_is_conjugate_rotation,
        test_input_classes.test_backward_matches_its_reference,
    ),
}


def table_rows() -> list[str]:
    """The keys of the Coverage table's rows: the code span that opens each row's first cell."""
    section = (REPO / "docs" / "conformance.md").read_text().split("## Coverage", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([\w-]+)`", section, flags=re.MULTILINE)


def parametrized_cases(test: Callable) -> list[Case]:
    """The cases a test is parametrized with in this process."""
    (mark,) = [mark for mark in test.pytestmark if mark.name == "parametrize"]
    return [param.values[0] for param in mark.args[1]]


def fixed_cases(backend: str) -> list[Case]:
    """The fixed cases a backend runs: the matrix (whole on a GPU, its cover under the interpreter) and the input
    classes (whole on both)."""
    matrix = all_cases() if backend == "cuda" else [case for case in all_cases() if in_interpreter_cover(case)]
    return matrix + input_class_cases()


def test_the_judging_tests_run_the_matrix_and_the_input_classes() -> None:
    for matrix_test, input_class_test in JUDGES.values():
        assert parametrized_cases(matrix_test) == runs_here(all_cases()), matrix_test.__name__
        assert parametrized_cases(input_class_test) == input_class_cases(), input_class_test.__name__


def test_the_table_lists_every_class_the_cases_have() -> None:
    assert sorted(table_rows()) == sorted(ROWS), "docs/conformance.md's Coverage table and ROWS disagree"
    classes = {name for case in all_cases() for name, belongs in ROWS.items() if belongs(case)}
    assert set(REGIMES) - classes <= {"normal", "large", "huge-angles"}, "a regime of the matrix has no row"


@pytest.mark.parametrize("backend", ["cuda", "interpreter"])
@pytest.mark.parametrize("row", list(ROWS))
def test_every_cell_of_the_table_is_covered_forward_inverse_and_backward(row, backend) -> None:
    cases = fixed_cases(backend)
    missing = [
        f"{dtype_name} {'inverse' if inverse else 'forward'}"
        for dtype_name, inverse in itertools.product(DTYPES, (False, True))
        if not any(ROWS[row](case) and case.dtype_name == dtype_name and case.inverse == inverse for case in cases)
    ]
    assert missing == [], f"{row}: no case on the {backend} backend for {missing} (forward, inverse and backward)"
