"""The GPU gate's helpers off the GPU: tools.same_cases reads a moved test file's cases under its new path and lets a
change add cases; tools.mutant_suite applies a mutation to a copy of the checkout exactly once; the side-by-side
timing script refuses a checkout it cannot run."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from dsv41_rope.conformance.mutations import MUTATIONS, TARGETS
from tools import mutant_suite, same_cases

REPO = Path(__file__).resolve().parents[1]


def _report(path: Path, cases: dict[str, dict]) -> Path:
    path.write_text(json.dumps({"cases": cases}))
    return path


def _case(nodeid: str, comparison: str = "fused-vs-oracle", mismatches: int = 0) -> tuple[str, dict]:
    return f"{nodeid}::{comparison}", {"nodeid": nodeid, "comparison": comparison, "mismatches": mismatches}


def test_a_moved_test_files_cases_are_the_same_cases(tmp_path, capsys) -> None:
    old = dict([_case("suite/test_a.py::test_x[c]")])
    new = dict([_case("suite/selftests/test_a.py::test_x[c]"), _case("suite/test_b.py::test_new[c]")])
    reference, other = _report(tmp_path / "r.json", old), _report(tmp_path / "o.json", new)
    assert same_cases.main([str(reference), str(other), "--strict"]) == 1
    moved = ["--moved", "suite/test_a.py=suite/selftests/test_a.py"]
    assert same_cases.main([str(reference), str(other), "--strict", *moved]) == 1, "a new case fails --strict"
    assert same_cases.main([str(reference), str(other), "--strict", "--allow-new", *moved]) == 0
    assert "0 only in the first, 1 only in the second, 0 differ" in capsys.readouterr().out


def test_a_case_whose_numbers_changed_fails_even_with_new_cases_allowed(tmp_path) -> None:
    reference = _report(tmp_path / "r.json", dict([_case("s.py::t[c]")]))
    other = _report(tmp_path / "o.json", dict([_case("s.py::t[c]", mismatches=3)]))
    assert same_cases.main([str(reference), str(other), "--strict", "--allow-new"]) == 1


def test_a_mutated_checkout_carries_the_one_edit(tmp_path) -> None:
    name = "bf16-tie-rounds-half-up"
    checkout = mutant_suite.mutated_checkout(name, tmp_path / "copy")
    original, mutated = MUTATIONS[name]
    text = (checkout / "dsv41_rope" / "kernel" / TARGETS[name]).read_text()
    assert original not in text and text.count(mutated) == 1
    assert (checkout / "dsv41_rope" / "conformance" / "test_forward_bits.py").is_file()


def test_an_unknown_mutation_is_refused(capsys) -> None:
    assert mutant_suite.main(["no-such-mutation"]) == 2
    assert "unknown mutations ['no-such-mutation']" in capsys.readouterr().err


@pytest.mark.parametrize("arguments", [[], ["/nonexistent", "out"]])
def test_the_side_by_side_timing_refuses_what_it_cannot_run(tmp_path, arguments) -> None:
    done = subprocess.run(["bash", str(REPO / "tools" / "suite_side_by_side.sh"), *arguments], capture_output=True)
    assert done.returncode == 2 and b"Usage:" in done.stderr
