"""The published figures are the committed results: README's status table is checked figure by figure against the JSON
that ``benchmarks/results/index.json`` names for it, the index against the files it lists, and the generated blocks of
README.md and docs/benchmarks.md against what ``python -m benchmarks.table --check`` would write. Run history stays in
git and in ``docs/decisions/``, out of the front page and the docs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
STATUS_ANCHOR = "README.md#status"
# The most files of run evidence the tree may hold (the index and its README aside).
MAX_RESULT_FILES = 30
DTYPES = {"BF16": "bfloat16", "FP16": "float16", "FP32": "float32"}


def load_index() -> dict[str, Any]:
    """The committed index of ``benchmarks/results``."""
    return json.loads((RESULTS / "index.json").read_text(encoding="utf-8"))


def status_source() -> tuple[str, dict[str, Any]]:
    """The path and JSON document of the one indexed file that backs README's status table."""
    paths = [entry["path"] for entry in load_index()["files"] if STATUS_ANCHOR in entry["backs"]]
    assert len(paths) == 1, f"benchmarks/results/index.json: {len(paths)} files back {STATUS_ANCHOR}: {paths}"
    return paths[0], json.loads((REPO / paths[0]).read_text(encoding="utf-8"))


def status_section() -> str:
    """README's status block, between its markers."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- status:begin -->\n(.*?)<!-- status:end -->", text, re.DOTALL)
    assert match, "README.md has no <!-- status:begin --> ... <!-- status:end --> block"
    return match.group(1)


def status_rows() -> list[dict[str, str]]:
    """The status table's rows as {column header: cell}."""
    lines = [line for line in status_section().splitlines() if line.startswith("|")]
    assert len(lines) >= 3, "README's status block holds no table"
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def test_every_status_figure_is_the_committed_gate() -> None:
    path, document = status_source()
    measured = {(row["case"], row["dtype"], row["op"]): row["ours_ms"] / row["copy_ms"] for row in document["rows"]}
    rows = status_rows()
    assert {row["tensor"] for row in rows} == {case for case, _, _ in measured}
    checked = 0
    for row in rows:
        sample = next(r for r in document["rows"] if r["case"] == row["tensor"])
        assert row["shape"] == "x".join(str(size) for size in sample["shape"]), row
        assert row["L2"] == sample["l2"], row
        for column, cell in row.items():
            dtype, _, op = column.partition(" ")
            if dtype not in DTYPES:
                continue
            key = (row["tensor"], DTYPES[dtype], op)
            if cell == "-":
                assert key not in measured, f"README shows no figure for {key}, the JSON has one"
                continue
            assert key in measured, f"README shows {cell} for {key}, which {path} does not hold"
            assert cell == f"{measured[key]:.3f}", f"README: {key} reads {cell}, {path} gives {measured[key]:.3f}"
            checked += 1
    assert checked == len(measured), f"README's status shows {checked} of the gate's {len(measured)} figures"


def test_the_status_names_the_kernel_gpu_date_and_source() -> None:
    path, document = status_source()
    env = document["environment"]
    section = status_section()
    date = datetime.fromisoformat(env["date"]).astimezone(UTC).date().isoformat()
    for fact in (f"`{env['kernel_sha256']}`", env["gpu"], date, env["torch"], env["triton"], f"`{path}`"):
        assert fact in section, f"README's status does not say {fact}"
    assert document["status"] == "complete", f"{path} is not a complete gate: {document['status']}"


def test_the_index_records_each_result_file_as_its_json_does() -> None:
    index = load_index()
    listed = {entry["path"]: entry for entry in index["files"]}
    present = {p.relative_to(REPO).as_posix() for p in RESULTS.rglob("*.json") if p.name != "index.json"}
    assert set(listed) == present, "benchmarks/results/index.json lists other files than the folder holds"
    for path, entry in listed.items():
        document = json.loads((REPO / path).read_text(encoding="utf-8"))
        env = document["environment"]
        assert entry["kind"] == document["schema"].removeprefix("rope-benchmark-").split("/")[0], path
        assert entry["gpu"] == env["gpu"], path
        assert entry["kernel_sha256"] == env["kernel_sha256"], path
        assert datetime.fromisoformat(entry["date"].replace("Z", "+00:00")) == datetime.fromisoformat(env["date"]), path
        assert entry.get("git_commit") == env.get("git_commit"), path
        assert entry["backs"], f"{path} backs nothing: why is it kept?"
        for anchor in entry["backs"]:
            assert (REPO / anchor.split("#", 1)[0]).exists(), f"{path} backs {anchor}, which does not exist"


def test_the_tree_holds_little_run_evidence() -> None:
    files = [p for p in RESULTS.rglob("*") if p.is_file() and p.name not in ("index.json", "README.md")]
    assert len(files) <= MAX_RESULT_FILES, f"{len(files)} result files; superseded ones belong in git history"
    assert not (REPO / "docs" / "gpu-runs").exists(), "docs/gpu-runs/ is run history: git keeps it"


@pytest.mark.parametrize(
    "doc", ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]
)
def test_no_run_history_in_the_front_page_and_docs(doc: str) -> None:
    text = (REPO / doc).read_text(encoding="utf-8")
    found = re.findall(r"\b[Rr]uns? [0-9]+\b|gpu-runs", text)
    assert not found, f"{doc} cites run history ({found[:3]}): put the finding in docs/decisions/"


def test_the_generated_blocks_are_up_to_date() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.table", "--check"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"python -m benchmarks.table --check:\n{done.stdout}{done.stderr}"
