"""``benchmarks.stages`` times the kernel with one stage edited out, by replacing a piece of one kernel module's text;
each edit must still find its text, exactly once, in the module it names (else the GPU run of the stages fails)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL = ROOT / "dsv41_rope" / "kernel"


def _stage_edits() -> dict[str, tuple[str, str, str]]:
    """``STAGE_EDITS`` read from the benchmark's source (tests do not import benchmarks: ``test_architecture.py``)."""
    tree = ast.parse((ROOT / "benchmarks" / "stages.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STAGE_EDITS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("benchmarks/stages.py defines no STAGE_EDITS")


@pytest.mark.parametrize("stage", list(_stage_edits()))
def test_stage_edit_applies_to_the_kernel(stage: str) -> None:
    module, original, edited = _stage_edits()[stage]
    count = (KERNEL / module).read_text().count(original)
    assert count == 1, f"stage edit {stage!r} finds its text {count} times in {module}"
    assert edited != original
