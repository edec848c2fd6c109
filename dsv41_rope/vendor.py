"""Vendoring: a self-contained copy of the kernel package for another project to ship, and imports of such copies.

Usage:
    python -m dsv41_rope.vendor DEST_DIR --namespace NAME [--force]

writes the kernel as a package at ``DEST_DIR``, importable as ``DEST_DIR``'s last component when its parent is on
``sys.path`` (``nemo_automodel/components/models/deepseek_v41/rope`` imports as ``...deepseek_v41.rope``), with the
same public functions, its ``torch.library`` operators registered under the namespace ``NAME``, and a
``VENDORED.json`` that records the source's kernel hash. The kernel's imports are relative, so nothing else of
dsv41-rope is needed.

The same copy, loaded under a fresh name (:func:`load_copy`), is how the gating-mutation test imports a mutant and
how the speed gate imports another revision's kernel.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import sys
import types
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from dsv41_rope.harness.provenance import kernel_sha256, source_files

__all__ = ["KERNEL_DIR", "NAMESPACE_LINE", "VendorError", "load_copy", "main", "write_copy"]

KERNEL_DIR = Path(__file__).resolve().parent / "kernel"
# The one line of the kernel that names its operators' namespace; a copy replaces it.
NAMESPACE_LINE = re.compile(r"^OPERATOR_NAMESPACE = .*$", re.MULTILINE)
_OPERATORS_FILE = "operators.py"


class VendorError(ValueError):
    """A copy cannot be written: a bad namespace, or a destination that is not empty."""


def write_copy(
    destination: str | Path, namespace: str, *, source: str | Path = KERNEL_DIR, force: bool = False
) -> Path:
    """Write the kernel package at ``destination`` with its operators under ``namespace``.

    Args:
        destination: the package folder to create; its last component is the package's name.
        namespace: the ``torch.library`` namespace of the copy's operators (a Python identifier), unique in a process.
        source: the kernel package to copy (default this one; a test passes another revision's or a mutant's).
        force: replace a destination that exists and is not empty.

    Returns:
        The destination folder.

    Raises:
        VendorError: ``namespace`` or the destination's name is not an identifier, or the destination is not empty
            and ``force`` is not set.
    """
    destination, source = Path(destination), Path(source)
    if not namespace.isidentifier():
        raise VendorError(f"--namespace must be a Python identifier (torch.library's rule), got {namespace!r}")
    if not destination.name.isidentifier():
        raise VendorError(
            f"the copy is imported by its folder's name, which must be an identifier: {destination.name!r}"
        )
    if destination.exists() and any(destination.iterdir()):
        if not force:
            raise VendorError(f"{destination} exists and is not empty: pass --force to replace it")
        shutil.rmtree(destination)
    destination.mkdir(parents=True, exist_ok=True)
    for file in source_files(source):
        target = destination / file.relative_to(source)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    operators = destination / _OPERATORS_FILE
    text, count = NAMESPACE_LINE.subn(f"OPERATOR_NAMESPACE = {namespace!r}", operators.read_text(encoding="utf-8"))
    if count != 1:
        raise VendorError(f"{source / _OPERATORS_FILE} names its operators' namespace {count} times, expected once")
    operators.write_text(text, encoding="utf-8")
    record = {
        "source": "dsv41-rope",
        "version": _version(),
        "kernel_sha256": kernel_sha256(source),
        "namespace": namespace,
        "command": f"python -m dsv41_rope.vendor {destination.name} --namespace {namespace}",
    }
    (destination / "VENDORED.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return destination


def load_copy(directory: str | Path, module_name: str | None = None) -> types.ModuleType:
    """Import the kernel package at ``directory`` as a fresh package (Triton reads kernel source through ``inspect``,
    so the files stay where they are).

    Args:
        directory: a kernel package folder: a vendored copy, a mutant, or another revision's export.
        module_name: the package's name in ``sys.modules``; default the folder's name. It must not be imported yet.

    Returns:
        The package, with its submodules imported by its ``__init__``.
    """
    directory = Path(directory).resolve()
    name = module_name or directory.name
    if name in sys.modules:
        raise ImportError(f"a module named {name!r} is imported already: load the copy under another name")
    spec = importlib.util.spec_from_file_location(
        name, directory / "__init__.py", submodule_search_locations=[str(directory)]
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no kernel package at {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its relative imports look the package up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        for loaded in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
            del sys.modules[loaded]
        raise
    return module


def _version() -> str:
    try:
        return version("dsv41-rope")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns 0, or 2 on a usage error."""
    parser = argparse.ArgumentParser(prog="python -m dsv41_rope.vendor", description=__doc__.splitlines()[0])
    parser.add_argument("destination", type=Path, help="the package folder to write; its name is the import name")
    parser.add_argument("--namespace", required=True, help="torch.library namespace of the copy's operators")
    parser.add_argument("--force", action="store_true", help="replace a destination that is not empty")
    args = parser.parse_args(argv)
    try:
        written = write_copy(args.destination, args.namespace, force=args.force)
    except VendorError as error:
        parser.error(str(error))
    print(f"vendored kernel {kernel_sha256(KERNEL_DIR)} to {written}, operators as torch.ops.{args.namespace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
