"""Provenance: which kernel source a result records, found from the kernel module, and what a run record holds."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dsv41_rope.harness import provenance

REPO = Path(__file__).resolve().parents[1]


def test_kernel_source_is_the_imported_modules_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "other_kernel.py"
    source.write_text("KERNEL = 'another implementation'\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "kernels.other", types.SimpleNamespace(__file__=str(source)))
    assert provenance.kernel_source("kernels.other") == source
    assert provenance.kernel_sha256(source) == hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    assert provenance.record(kernel_path=source)["kernel_sha256"] == provenance.kernel_sha256(source)


def test_kernel_source_of_a_module_not_imported_is_found_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "unimported_kernels"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "rope.py").write_text("raise RuntimeError('importing the kernel is not allowed here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert provenance.kernel_source("unimported_kernels.rope") == package / "rope.py"
        assert "unimported_kernels.rope" not in sys.modules
    finally:
        sys.modules.pop("unimported_kernels", None)  # the parent package is imported to find the module


def test_no_kernel_source_gives_no_digest(tmp_path: Path) -> None:
    assert provenance.kernel_source("no_such_package.kernel") is None
    assert provenance.kernel_sha256(None) is None
    assert provenance.kernel_sha256(tmp_path / "missing.py") is None


def test_a_package_kernel_is_its_folder_hashed_file_by_file(tmp_path: Path) -> None:
    package = tmp_path / "kernel_package"
    (package / "__pycache__").mkdir(parents=True)
    (package / "__init__.py").write_text("from .launch import rotate\n", encoding="utf-8")
    (package / "launch.py").write_text("def rotate(values, angles):\n    return values\n", encoding="utf-8")
    (package / "tuning.json").write_text("{}\n", encoding="utf-8")
    (package / "__pycache__" / "launch.cpython-311.pyc").write_bytes(b"left out")
    expected = hashlib.sha256()
    for name in ("__init__.py", "launch.py", "tuning.json"):
        expected.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    assert provenance.kernel_sha256(package) == expected.hexdigest()[:16]
    assert [path.name for path in provenance.source_files(package)] == ["__init__.py", "launch.py", "tuning.json"]


def test_default_kernel_is_the_repository_kernel_package() -> None:
    kernel = Path(__file__).resolve().parents[1] / "dsv41_rope" / "kernel"
    assert provenance.kernel_source() == kernel
    metadata = provenance.run_metadata("pytest -k bf16")
    assert metadata["kernel_sha256"] == provenance.kernel_sha256(kernel)
    assert metadata["command"] == "pytest -k bf16"
    for key in (
        "created",
        "hostname",
        "platform",
        "python",
        "torch",
        "triton",
        "cuda",
        "hypothesis",
        "gpu",
        "git_commit",
    ):
        assert key in metadata


def test_the_hypothesis_version_is_read_without_importing_hypothesis() -> None:
    """The generated cases depend on it; the report's controller, which imports no test module, records it too."""
    code = (
        "import importlib.metadata, sys\n"
        "from dsv41_rope.harness import provenance\n"
        "recorded = provenance.versions()['hypothesis']\n"
        "assert 'hypothesis' not in sys.modules, 'provenance imported hypothesis'\n"
        "assert recorded == importlib.metadata.version('hypothesis'), recorded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
