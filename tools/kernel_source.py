"""One interface over a kernel source, whichever layout it has: a kernel package directory (``dsv41_rope/kernel``, a
vendored copy, or a revision's export by ``tools/export_kernel.sh``) or a single-file kernel (revisions before the
package, ``impl/rope_triton.py``).

A package is imported through :func:`dsv41_rope.vendor.load_copy` and reached through its public names
(``rotary_kernel.rope_kernel``, ``launch.make_plan``, ``launch.KernelSettings``); a single file is imported as one
module and reached through the private names it had (``_rope_kernel``, ``_make_plan``, ``KernelSettings``).
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks.common import import_file

__all__ = ["KernelSource", "load_kernel"]

_LOADED = itertools.count()


@dataclasses.dataclass(frozen=True)
class KernelSource:
    """A loaded kernel, reached through one set of names.

    Attributes:
        path: the package directory or the single file it was loaded from.
        module: the package (its ``__init__``) or the single-file module.
        rope_kernel: the ``@triton.jit`` function one launch runs.
        make_plan: ``make_plan(values, frequencies, output, negate_sin, settings, config)``, returning a plan with
            the kernel's ``scalars`` (every argument after its three pointers, by name) and ``num_warps``.
        kernel_settings: the class of ``make_plan``'s ``settings``: ``(contraction, in_kernel_frequencies, source)``.
        sha256: 16 hex digits over its source files, as runs record the kernel they ran
            (:func:`dsv41_rope.harness.provenance.kernel_sha256`).
    """

    path: Path
    module: ModuleType
    rope_kernel: Any
    make_plan: Callable[..., Any]
    kernel_settings: type
    sha256: str

    @property
    def kernel_name(self) -> str:
        """The Triton function's name, which its compiled code carries (``rope_kernel``, or ``_rope_kernel``)."""
        return self.rope_kernel.fn.__name__


def load_kernel(path: Path) -> KernelSource:
    """Imports the kernel source at ``path``, a kernel package directory or a single-file kernel, as a fresh module.

    Raises:
        FileNotFoundError: ``path`` is neither a directory with an ``__init__.py`` nor a ``.py`` file.
    """
    from dsv41_rope.harness.provenance import kernel_sha256
    from dsv41_rope.vendor import load_copy

    path = Path(path)
    digest = kernel_sha256(path) or "unknown"
    if path.is_dir() and (path / "__init__.py").is_file():
        package = load_copy(path, f"kernel_source_{path.name}_{next(_LOADED)}")
        launch = importlib.import_module(f"{package.__name__}.launch")
        rotary = importlib.import_module(f"{package.__name__}.rotary_kernel")
        return KernelSource(path, package, rotary.rope_kernel, launch.make_plan, launch.KernelSettings, digest)
    if path.is_file() and path.suffix == ".py":
        module = import_file(path, f"kernel_source_{path.stem}_{next(_LOADED)}")
        return KernelSource(path, module, module._rope_kernel, module._make_plan, module.KernelSettings, digest)
    raise FileNotFoundError(f"{path}: neither a kernel package directory (with __init__.py) nor a single .py file")
