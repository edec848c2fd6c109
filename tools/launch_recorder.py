"""A pytest plugin that records every launch the kernel's own launch rule configures, for :mod:`tools.build_cost`.

The suite's generated layouts are most of its Triton builds from a fresh cache (``docs/ci.md``). Under Triton's
interpreter a run draws the same examples as on a GPU; this plugin writes each launch's shapes, strides, dtypes and
pointer alignments (not its data), so that ``python -m tools.build_cost --launches DIR`` can build them for sm_90 as
the GPU's launcher would configure them::

    DSV41_LAUNCH_RECORD=/tmp/launches ./run conformance -p tools.launch_recorder -k generated_layouts
    python -m tools.build_cost --launches /tmp/launches --sample 60

Launches given an explicit configuration (the suite's forced chunkings, calibration's) are not recorded: the rule
does not make them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from dsv41_rope.harness.under_test import runs_tests

if TYPE_CHECKING:
    import torch

__all__ = ["ENVIRONMENT_VARIABLE", "launch_record", "pytest_configure", "recording"]

ENVIRONMENT_VARIABLE = "DSV41_LAUNCH_RECORD"
_KERNEL_PACKAGE = "dsv41_rope.kernel"


def launch_record(
    values: torch.Tensor, frequencies: torch.Tensor, output: torch.Tensor, negate_sin: bool
) -> dict[str, Any]:
    """What :mod:`tools.build_cost` needs of one launch: shapes, strides, dtype, in place or not, the sign of sin and
    the pointers' 16-byte alignments; the angles' shape is the frequencies' first three dimensions (angles, or
    torch.polar's ``[..., pairs, 2]`` table of them)."""
    return {
        "shape": list(values.shape),
        "stride": list(values.stride()),
        "dtype": str(values.dtype).removeprefix("torch."),
        "angles": list(frequencies.shape[:3]),
        "in_place": output is values,
        "output_stride": list(output.stride()),
        "negate_sin": negate_sin,
        "aligned": [tensor.data_ptr() % 16 == 0 for tensor in (values, frequencies, output)],
    }


def recording(launch: Callable[..., None], path: Path) -> Callable[..., None]:
    """``launch`` (the kernel's ``launch_kernel``), appending a :func:`launch_record` line to ``path`` for each
    launch that takes the launch rule's configuration."""

    def recorded(
        values: torch.Tensor,
        frequencies: torch.Tensor,
        output: torch.Tensor,
        *,
        negate_sin: bool,
        settings: Any,
        config: Any = None,
    ) -> None:
        if config is None:
            with path.open("a") as file:
                file.write(json.dumps(launch_record(values, frequencies, output, negate_sin)) + "\n")
        launch(values, frequencies, output, negate_sin=negate_sin, settings=settings, config=config)

    return recorded


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Wraps ``launch_kernel`` in every module of the kernel package that holds it (each imported it by name)."""
    directory = os.environ.get(ENVIRONMENT_VARIABLE)
    if not directory or not runs_tests(config):  # xdist's controller launches nothing
        return
    import dsv41_rope.kernel  # noqa: F401  (its __init__ imports every module that launches)
    from dsv41_rope.kernel.launch import launch_kernel

    path = Path(directory) / f"launches-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    wrapped = recording(launch_kernel, path)
    for name, module in list(sys.modules.items()):
        in_package = name == _KERNEL_PACKAGE or name.startswith(f"{_KERNEL_PACKAGE}.")
        if in_package and getattr(module, "launch_kernel", None) is launch_kernel:
            module.launch_kernel = wrapped
