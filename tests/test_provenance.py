"""Provenance: which kernel source a result records, found from the kernel module, and what a run record holds."""

from __future__ import annotations

import hashlib
import sys
import types
from pathlib import Path

import pytest

from conformance import provenance


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


def test_default_kernel_is_the_repository_kernel() -> None:
    kernel = Path(__file__).resolve().parents[1] / "impl" / "rope_triton.py"
    assert provenance.kernel_source() == kernel
    metadata = provenance.run_metadata("pytest -k bf16")
    assert metadata["kernel_sha256"] == hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]
    assert metadata["command"] == "pytest -k bf16"
    for key in ("created", "hostname", "platform", "python", "torch", "triton", "cuda", "gpu", "git_commit"):
        assert key in metadata
