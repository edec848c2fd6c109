"""``dsv41-rope matrix`` end to end with two tiny stand-in peers, one right and one wrong, on the CPU: each runs the
installed suite in its own process, the right one's row is PASS throughout, the wrong one's FAILs exactly where its
defect shows and links a standalone reproduction that shows it; and the columns' reading of a run."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsv41_rope.matrix import columns, command, table
from dsv41_rope.peers.registry import Peer

RIGHT = Peer("right", None, None, "dsv41_rope.conformance.judged.plain:rope", "plain rope", "pytorch", "project", True)
WRONG = Peer(
    "wrong",
    None,
    None,
    "dsv41_rope.conformance.judged.plain:forgets_the_conjugate",
    "plain rope that forgets the conjugate",
    "pytorch",
    "project",
    True,
)
# The wrong stand-in's call, standalone: the inverse rotates by the angle itself.
WRONG_CALL = """\
pairs = torch.view_as_complex(values[..., -2 * angles.shape[-1]:].float().unflatten(-1, (-1, 2)).clone())
factors = torch.polar(torch.ones_like(angles), angles)
factors = factors.unsqueeze(2) if values.dim() == 4 else factors
rotated = torch.view_as_real(pairs * factors).flatten(-2).to(values.dtype)
got = torch.cat((values[..., : values.shape[-1] - rotated.shape[-1]], rotated), dim=-1)
"""


def _arguments(**overrides) -> argparse.Namespace:
    defaults = {"jobs": 2, "time_limit": 600, "workers": "1", "case_size": "small", "smoke": True, "no_speed": True}
    return argparse.Namespace(**{**defaults, "speed_budget": 60, "from_runs": None, "commit": None, **overrides})


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("matrix")
    calls = {WRONG.adapter: WRONG_CALL}
    original = command.repro_call_of
    command.repro_call_of = lambda adapter: calls[adapter]
    try:
        return command.run_matrix([RIGHT, WRONG], out, _arguments()), out
    finally:
        command.repro_call_of = original


def test_the_right_peer_passes_every_column(matrix) -> None:
    right = matrix[0]["rows"][0]
    assert right["status"] == "judged", right["status"]
    # The smoke selection holds no subnormal case and no layout but contiguous ones: those columns ran nothing.
    assert right["cells"] == {**dict.fromkeys(right["cells"], "PASS"), "subnormals": "n/a", "layouts": "n/a"}
    assert right["references"] == ["eager on the CPU"]


def test_the_wrong_peer_fails_where_its_defect_shows_and_links_a_reproduction(matrix) -> None:
    written, out = matrix
    wrong = written["rows"][1]
    failing = {title for title, cell in wrong["cells"].items() if cell.startswith("FAIL")}
    assert failing == {"inverse", "backward"}, wrong["cells"]
    repros = {repro["column"]: repro for repro in wrong["repros"]}
    assert set(repros) == failing
    inverse = out / repros["inverse"]["path"]
    assert len(inverse.read_text().splitlines()) <= 30
    done = subprocess.run([sys.executable, str(inverse)], capture_output=True, text=True, check=True)
    assert " elements differ from eager on cpu" in done.stdout and not done.stdout.startswith("0 of"), done.stdout
    assert "got " in done.stdout and " expected " in done.stdout and " truth " in done.stdout


def test_the_files_are_written_and_the_markdown_links_the_reproductions(matrix) -> None:
    written, out = matrix
    assert json.loads((out / "matrix.json").read_text())["rows"][1]["peer"] == "wrong"
    markdown = (out / "matrix.md").read_text()
    assert "| right |" in markdown and "| wrong |" in markdown
    assert "[FAIL " in markdown and "](repros/wrong/inverse.py)" in markdown


def test_a_peer_that_is_not_installed_or_cannot_run_says_why(tmp_path) -> None:
    missing = Peer("missing", "no-such-distribution", "1.0", "no_such_module:f", "-", "pytorch", "installed", True)
    unavailable = Peer("far", None, None, "x:f", "-", "cuda", "project", False, unavailable="its wheel is 336 MB")
    rows = command.run_matrix([missing, unavailable], tmp_path, _arguments())["rows"]
    assert rows[0]["status"] == "not installed: pip install --no-deps no-such-distribution==1.0"
    assert rows[1]["status"] == "unavailable: its wheel is 336 MB"


def test_an_unknown_peer_is_a_usage_error(capsys) -> None:
    assert command.main(["--peers", "no-such-peer", "--no-speed"]) == 2
    assert "no peer 'no-such-peer'" in capsys.readouterr().err


def test_columns_count_failures_by_what_failed_them() -> None:
    tests = {
        "m::test_fused_equals_oracle[bf16-4d-contiguous-q-forward-special]": "failed",
        "m::test_fused_equals_oracle[fp32-4d-contiguous-q-inverse-normal]": "passed",
        "m::test_gradient_is_conjugate_rotation[fp32-4d-contiguous-q-forward-normal]": "skipped",
    }
    failures = {
        "p.py::test_fused_equals_oracle[bf16-4d-contiguous-q-forward-special]": {
            "what": "fused-vs-eager: NaN bit-pattern differences"
        }
    }
    cells = columns.cells(tests, failures, has_backward=True)
    assert cells["forward BF16"] == "FAIL 1/1" and cells["inverse"] == "PASS" and cells["backward"] == "n/a"
    assert cells["NaN payloads"] == "FAIL 1/1" and cells["signed zeros"] == "PASS"
    assert columns.cells(tests, failures, has_backward=False)["backward"] == "n/a"


def test_the_docs_page_is_generated_from_the_committed_matrix() -> None:
    assert table.main(["--docs", "--check"]) == 0, "run: python -m dsv41_rope.matrix.table --docs"


def test_every_published_reproduction_is_at_most_30_lines_of_torch_and_its_peer() -> None:
    matrix = json.loads(table.DOCS_JSON.read_text())
    for row in matrix["rows"]:
        for repro in row.get("repros", []):
            source = (table.DOCS_JSON.parent / repro["path"]).read_text()
            assert len(source.splitlines()) <= 30, repro["path"]
            assert "dsv41_rope" not in source.split('"""', 2)[-1], f"{repro['path']} imports the project"
