"""How an adapter reaches its peer: an installed import, one module file of an installed distribution, or one file of
a source archive, each failing with the distribution and pinned version to install.

Nothing here imports torch or a peer when the module loads; the adapters call these inside their cached loaders.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import sys
import tarfile
import tempfile
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PEER_WHEELS_VARIABLE",
    "PeerVersionWarning",
    "Pin",
    "import_installed",
    "load_distribution_file",
    "load_file",
    "load_sdist_member",
    "missing",
    "sdist_archive",
]

# The folder tools/fetch_peer_wheels.sh downloads into; an adapter that reads an archive (not an installed
# distribution) finds it there.
PEER_WHEELS_VARIABLE = "DSV41_PEER_WHEELS"


class PeerVersionWarning(UserWarning):
    """The installed peer is not the version the registry pins: its adapter was written against the pinned one."""


@dataclass(frozen=True)
class Pin:
    """A peer's distribution as PyPI names it, and the version its adapter was written against."""

    distribution: str
    version: str

    def __str__(self) -> str:
        return f"{self.distribution}=={self.version}"


def missing(pin: Pin, what: str, detail: str = "") -> ModuleNotFoundError:
    """The error an adapter raises when its peer is not here: what it needed, and the install line."""
    advice = f"install it with `pip install --no-deps {pin}` (tools/fetch_peer_wheels.sh DEST downloads it)"
    return ModuleNotFoundError(f"{what} needs {pin}{f' ({detail})' if detail else ''}: {advice}")


def _installed_version(pin: Pin, what: str) -> str:
    """The installed version of ``pin``'s distribution (warning when it is not the pinned one)."""
    try:
        found = importlib.metadata.version(pin.distribution)
    except importlib.metadata.PackageNotFoundError as error:
        raise missing(pin, what, "not installed") from error
    if found != pin.version:
        warnings.warn(f"{what}: found {pin.distribution} {found}, the adapter pins {pin}", PeerVersionWarning, 2)
    return found


def import_installed(module: str, pin: Pin) -> types.ModuleType:
    """Imports ``module`` of the installed distribution ``pin`` (its whole import chain runs).

    Raises:
        ModuleNotFoundError: the distribution is not installed, or the module's import chain needs a package that is
            not: the message names the pin to install and the module that was missing.
    """
    _installed_version(pin, module)
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        raise missing(pin, module, f"its import chain needs {error.name!r}, which is not installed") from error


def load_file(path: Path, alias: str) -> types.ModuleType:
    """Executes the Python file at ``path`` as module ``alias``, registered in ``sys.modules`` (Triton reads a
    kernel's source through ``inspect``, which needs a real file, and dataclasses look their module up there); a
    second call returns the module already loaded."""
    if alias in sys.modules:
        return sys.modules[alias]
    spec = importlib.util.spec_from_file_location(alias, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[alias]
        raise
    return module


def load_distribution_file(pin: Pin, relative_path: str, alias: str) -> types.ModuleType:
    """Loads one module file of the installed distribution ``pin`` by its path, without importing the packages above
    it (whose ``__init__`` would import a server stack).

    Args:
        pin: the distribution and the version the adapter pins.
        relative_path: the file inside the distribution, e.g. ``sglang/kernels/ops/attention/dsv4/rope.py``.
        alias: the module name it is registered under (private to this project, so it never shadows the peer's).

    Raises:
        ModuleNotFoundError: the distribution is not installed, or has no such file.
    """
    _installed_version(pin, relative_path)
    path = Path(str(importlib.metadata.distribution(pin.distribution).locate_file(relative_path)))
    if not path.is_file():
        raise missing(pin, relative_path, f"the installed distribution has no {path}")
    return load_file(path, alias)


def sdist_archive(pin: Pin) -> Path | None:
    """``$DSV41_PEER_WHEELS/<distribution>-<version>.tar.gz`` (the name with underscores), None where it is not."""
    folder = os.environ.get(PEER_WHEELS_VARIABLE, "")
    archive = Path(folder) / f"{pin.distribution.replace('-', '_')}-{pin.version}.tar.gz"
    return archive if folder and archive.is_file() else None


def load_sdist_member(pin: Pin, member: str, sha256: str, alias: str) -> types.ModuleType:
    """Loads one Python file straight out of ``pin``'s source archive, which is never built or installed.

    The archive is ``$DSV41_PEER_WHEELS/<distribution>-<version>.tar.gz`` (as tools/fetch_peer_wheels.sh saves it,
    the distribution's name with underscores); the member is written once to the temporary folder under its SHA-256,
    which must be ``sha256``, and loaded from there.

    Raises:
        ModuleNotFoundError: the variable is unset or the archive is not in its folder.
        ImportError: the archive has no such member, or the member's SHA-256 is not the pinned one.
    """
    archive = sdist_archive(pin)
    if archive is None:
        name = f"{pin.distribution.replace('-', '_')}-{pin.version}.tar.gz"
        raise missing(pin, member, f"its source archive, looked for at ${PEER_WHEELS_VARIABLE}/{name}")
    with tarfile.open(archive) as opened:
        try:
            source = opened.extractfile(member)
        except KeyError as error:
            raise ImportError(f"{archive} has no member {member}") from error
        data = source.read() if source is not None else b""
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise ImportError(f"{archive}: {member} has SHA-256 {digest}, the adapter pins {sha256}")
    path = Path(tempfile.gettempdir()) / "dsv41_rope_peers" / f"{alias}-{digest[:16]}.py"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_bytes(data)
        partial.replace(path)  # atomic: another process loading the same file never reads half of it
    return load_file(path, alias)
