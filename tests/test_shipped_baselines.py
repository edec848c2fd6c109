"""The accepted baselines that ship in the package are clean records: saved from a committed tree, with no absolute
path of the machine that saved them, with the hypothesis version that drew their generated cases, and from the kernel
that is committed beside them (or they say why not)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from dsv41_rope.harness.provenance import kernel_sha256
from dsv41_rope.report.model import portable_metadata

REPO = Path(__file__).resolve().parents[1]
BASELINES = sorted((REPO / "dsv41_rope" / "baselines").glob("*.json"))
KERNEL = REPO / "dsv41_rope" / "kernel"
# A baseline whose kernel hash differs from the committed kernel's says why under this key.
KERNEL_NOTE = "kernel_note"
ABSOLUTE_PATH = re.compile(r"(?<![\w.:~-])/[^\s'\"]+")


def pinned_hypothesis() -> str:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["conformance"]
    (pin,) = [requirement for requirement in extra if requirement.startswith("hypothesis==")]
    return pin.removeprefix("hypothesis==")


def metadata_of(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["metadata"]


def test_both_backends_ship_a_baseline() -> None:
    assert [path.name for path in BASELINES] == ["ulp-drift-cuda.json", "ulp-drift-interpreter.json"]


@pytest.mark.parametrize("path", BASELINES, ids=lambda path: path.name)
def test_the_baseline_was_saved_from_a_committed_tree(path: Path) -> None:
    metadata = metadata_of(path)
    assert metadata["git_dirty"] is False, f"{path.name} was saved from a tree with uncommitted changes"
    assert re.fullmatch(r"[0-9a-f]{40}", metadata.get("git_commit") or ""), metadata.get("git_commit")


@pytest.mark.parametrize("path", BASELINES, ids=lambda path: path.name)
def test_the_baseline_names_no_absolute_path(path: Path) -> None:
    found = ABSOLUTE_PATH.findall(json.dumps(metadata_of(path)))
    assert not found, f"{path.name} records paths of the machine that saved it: {found[:5]}"


@pytest.mark.parametrize("path", BASELINES, ids=lambda path: path.name)
def test_the_baseline_records_the_pinned_hypothesis(path: Path) -> None:
    assert metadata_of(path).get("hypothesis") == pinned_hypothesis()


@pytest.mark.parametrize("path", BASELINES, ids=lambda path: path.name)
def test_the_baseline_is_of_the_committed_kernel_or_says_why_not(path: Path) -> None:
    metadata = metadata_of(path)
    if metadata["kernel_sha256"] != kernel_sha256(KERNEL):
        assert metadata.get(KERNEL_NOTE), (
            f"{path.name} is of kernel {metadata['kernel_sha256']}, the committed kernel is {kernel_sha256(KERNEL)}: "
            f"re-save it, or say why its numbers still hold under {KERNEL_NOTE!r}"
        )


def test_saving_makes_paths_portable(tmp_path: Path) -> None:
    checkout = tmp_path / "checkout"
    metadata = {
        "command": f"pytest --ulp-report /tmp/run/report --ulp-save-baseline {checkout}/dsv41_rope/baselines/b.json",
        "from_tests": {"implementation": {"source": "/opt/venv/lib/site-packages/dsv41_rope/kernel"}},
        "gpu": "cuda:0 NVIDIA H200",
        "workers": ["gw0", 3],
    }
    assert portable_metadata(metadata, checkout) == {
        "command": "pytest --ulp-report report --ulp-save-baseline dsv41_rope/baselines/b.json",
        "from_tests": {"implementation": {"source": "dsv41_rope/kernel"}},
        "gpu": "cuda:0 NVIDIA H200",
        "workers": ["gw0", 3],
    }
