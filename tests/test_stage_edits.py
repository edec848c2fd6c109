"""``benchmarks.stages`` times the kernel with one stage edited out, by replacing a piece of the kernel's text; each
edit must still find its text, exactly once, in ``impl/rope_triton.py`` (else the GPU run of the stages fails)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
KERNEL = (ROOT / "impl" / "rope_triton.py").read_text()


def _stage_edits() -> dict[str, tuple[str, str]]:
    """``STAGE_EDITS`` read from the benchmark's source (tests do not import benchmarks: ``test_architecture.py``)."""
    tree = ast.parse((ROOT / "benchmarks" / "stages.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "STAGE_EDITS" for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("benchmarks/stages.py defines no STAGE_EDITS")


@pytest.mark.parametrize("stage", list(_stage_edits()))
def test_stage_edit_applies_to_the_kernel(stage: str) -> None:
    original, edited = _stage_edits()[stage]
    assert KERNEL.count(original) == 1, f"stage edit {stage!r} finds its text {KERNEL.count(original)} times"
    assert edited != original
