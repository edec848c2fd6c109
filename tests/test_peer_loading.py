"""How adapters reach their peers (``dsv41_rope.peers.loading``): importing ``dsv41_rope.peers`` imports no peer and
no torch; a missing peer, or a package its import chain needs, is an ``ImportError`` naming the distribution and version
to install; one module file loads by path without its package's ``__init__``; a file read out of an sdist must have
its pinned SHA-256; an installed version other than the pin warns.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import subprocess
import sys
import tarfile
import warnings
from pathlib import Path

import pytest

from dsv41_rope.peers import loading

REPO = Path(__file__).resolve().parents[1]
PEER_IMPORTS = ("nemo_automodel", "transformers", "sglang", "vllm", "flash_attn", "liger_kernel", "megatron")


def test_importing_the_package_imports_no_peer_and_no_torch():
    code = (
        "import sys, dsv41_rope.peers, dsv41_rope.peers.registry, dsv41_rope.peers.loading; print(sorted(sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    loaded = {name.partition(".")[0] for name in done.stdout.strip("[]\n").replace("'", "").split(", ")}
    assert loaded.isdisjoint({"torch", "triton", "numpy", *PEER_IMPORTS}), sorted(loaded & {"torch", *PEER_IMPORTS})


def test_an_import_chain_that_needs_a_missing_package_names_it(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda distribution: "1.0")
    with pytest.raises(ModuleNotFoundError, match=r"needs somepeer==1\.0 \(its import chain needs 'no_such_mod"):
        loading.import_installed("no_such_module_anywhere", loading.Pin("somepeer", "1.0"))


def fake_distribution(root: Path, name: str, version: str, files: dict[str, str]) -> None:
    """A distribution installed at ``root``: its ``dist-info`` and files."""
    info = root / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def test_one_module_loads_by_path_without_its_packages_init(monkeypatch, tmp_path):
    files = {"servestack/__init__.py": "raise ImportError('the server stack')\n", "servestack/ops/rope.py": "X = 7\n"}
    fake_distribution(tmp_path, "servestack", "2.0", files)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = loading.load_distribution_file(loading.Pin("servestack", "2.0"), "servestack/ops/rope.py", "peer_rope_t")
    monkeypatch.delitem(sys.modules, "peer_rope_t")
    assert module.X == 7 and "servestack" not in sys.modules
    with pytest.raises(ModuleNotFoundError, match="servestack==2.0 .*has no .*missing.py"):
        loading.load_distribution_file(loading.Pin("servestack", "2.0"), "servestack/missing.py", "peer_missing_t")
    with pytest.warns(loading.PeerVersionWarning, match="found servestack 2.0, the adapter pins servestack==3.0"):
        loading.load_distribution_file(loading.Pin("servestack", "3.0"), "servestack/ops/rope.py", "peer_rope_t")


def write_sdist(path: Path, member: str, text: str) -> None:
    with tarfile.open(path, "w:gz") as archive:
        data = text.encode()
        info = tarfile.TarInfo(member)
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))


def test_an_sdist_member_loads_only_with_its_pinned_digest(monkeypatch, tmp_path):
    write_sdist(tmp_path / "somepeer-1.0.tar.gz", "somepeer-1.0/somepeer/kernel.py", "Y = 3\n")
    monkeypatch.setenv(loading.PEER_WHEELS_VARIABLE, str(tmp_path))
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    pin, member = loading.Pin("somepeer", "1.0"), "somepeer-1.0/somepeer/kernel.py"
    digest = "10a1f0fd6be9bb4b0d5c0a1d4c8ee5e0cfb58ba6c2e8ea99b0ff1e2ed6bd6d11"
    with pytest.raises(ImportError, match=f"has SHA-256 [0-9a-f]{{64}}, the adapter pins {digest}"):
        loading.load_sdist_member(pin, member, digest, "peer_kernel_t")
    module = loading.load_sdist_member(pin, member, hashlib.sha256(b"Y = 3\n").hexdigest(), "peer_kernel_t")
    assert module.Y == 3 and Path(module.__file__).read_text() == "Y = 3\n"
    with pytest.raises(ImportError, match="has no member somepeer-1.0/other.py"):
        loading.load_sdist_member(pin, "somepeer-1.0/other.py", digest, "peer_other_t")


def test_a_version_other_than_the_pin_warns_once_per_load(monkeypatch):
    monkeypatch.setattr(importlib.metadata, "version", lambda distribution: "9.9")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loading.import_installed("json", loading.Pin("somepeer", "1.0"))
    assert [str(w.message) for w in caught] == ["json: found somepeer 9.9, the adapter pins somepeer==1.0"]
