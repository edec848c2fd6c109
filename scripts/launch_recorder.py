"""A pytest plugin that records every launch the kernel's own launch rule configures, for ``scripts.build_cost``.

The suite's generated layouts are most of its Triton builds from a fresh cache (``docs/ci.md``). Under Triton's
interpreter a run draws the same examples as on a GPU; this plugin writes each launch's shapes, strides, dtypes and
pointer alignments (not its data), so that ``python -m scripts.build_cost --launches DIR`` can build them for sm_90 as
the GPU's launcher would configure them::

    DSV41_LAUNCH_RECORD=/tmp/launches ./run conformance -p scripts.launch_recorder -k generated_layouts
    python -m scripts.build_cost --launches /tmp/launches --sample 60

Launches given an explicit configuration (the suite's forced chunkings) are not recorded: the rule does not make them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conformance.pytest_plugin import runs_tests

_ENV = "DSV41_LAUNCH_RECORD"


def _angles_shape(frequencies) -> list[int]:
    """The angles' shape ``[batch or 1, sequence or 1, pairs]``: the launch's frequencies are those angles, or
    torch.polar's ``[..., pairs, 2]`` table of them (under the interpreter)."""
    return list(frequencies.shape[:3])


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    directory = os.environ.get(_ENV)
    if not directory or not runs_tests(config):  # xdist's controller launches nothing
        return
    import impl.rope_triton as rope

    path = Path(directory) / f"launches-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    launch = rope._launch_kernel

    def recording(values, frequencies, output, *, negate_sin, settings, config=None):
        if config is None:
            record = {
                "shape": list(values.shape),
                "stride": list(values.stride()),
                "dtype": str(values.dtype).removeprefix("torch."),
                "angles": _angles_shape(frequencies),
                "in_place": output is values,
                "output_stride": list(output.stride()),
                "negate_sin": negate_sin,
                "aligned": [tensor.data_ptr() % 16 == 0 for tensor in (values, frequencies, output)],
            }
            with path.open("a") as file:
                file.write(json.dumps(record) + "\n")
        return launch(values, frequencies, output, negate_sin=negate_sin, settings=settings, config=config)

    rope._launch_kernel = recording
