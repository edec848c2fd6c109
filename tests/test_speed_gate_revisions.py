"""The speed gate (``benchmarks.run --against REV``) loads the kernel of a revision before the package existed (one
file, ``impl/rope_triton.py``) and after (the package ``dsv41_rope/kernel/``), each beside this checkout's, with its own
operators; off the GPU it is the loading that is checked, under the interpreter."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from benchmarks.against import load_revision
from dsv41_rope import kernel
from dsv41_rope.harness.provenance import kernel_sha256

REPO = Path(__file__).resolve().parents[1]
# The last main before the package: its kernel is the single file.
BEFORE_THE_PACKAGE = "34d07f5"


def _has(revision: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", revision], cwd=REPO, capture_output=True).returncode == 0


@pytest.mark.parametrize("revision", ["HEAD", BEFORE_THE_PACKAGE])
def test_a_revisions_kernel_loads_beside_ours_and_gives_its_bits(revision, tmp_path, monkeypatch):
    if not _has(revision):
        pytest.skip(f"this clone lacks {revision}")
    monkeypatch.chdir(REPO)
    theirs, sha256 = load_revision(revision, tmp_path)
    assert theirs.__name__ == f"rope_at_{revision}" and len(sha256) == 16
    if revision == "HEAD":
        assert sha256 == kernel_sha256(REPO / "dsv41_rope" / "kernel") or _dirty(), "HEAD's package, hashed alike"
    values = torch.randn(2, 3, 4, 40, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    angles = torch.rand(1, 3, 8, generator=torch.Generator().manual_seed(1)) * 100
    ours = kernel.apply_rope_triton(values, angles, inverse=True)
    assert torch.equal(theirs.apply_rope_triton(values, angles, inverse=True).view(torch.int16), ours.view(torch.int16))


def _dirty() -> bool:
    status = subprocess.run(["git", "status", "--porcelain", "--", "dsv41_rope/kernel"], cwd=REPO, capture_output=True)
    return bool(status.stdout.strip())
