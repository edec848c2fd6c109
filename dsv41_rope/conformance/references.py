"""What a computation of the implementation under test is held to: the eager path of the device where it computes.

- On a GPU: that GPU's own eager PyTorch path (every element), and the oracle's emulation of it on sampled positions,
  which the suite proves equal to it there (``test_oracle_equals_torch_eager``).
- On a CPU, for a call that launched a Triton kernel (under Triton's interpreter, which stands in for the GPU the
  kernel is written for): eager CUDA's bits, as the oracle emulates them (``dsv41_rope.oracle.eager``).
- On a CPU, for a call that ran PyTorch code: the CPU's own eager path (``dsv41_rope.kernel.apply_rope_eager`` on
  CPU tensors). The CPU's complex multiply is not CUDA's (it rounds differently, and keeps NaN payloads), so such a
  verdict says nothing of a GPU's bits; the verdict line says so.

Which one applies is decided per call from what the call runs (:func:`watch_triton_launches`), not from a flag the
user must know; ``--rope-reference`` (``Implementation.reference``) overrides it for the rare case. The project's
kernel thus meets both on a CPU: its fused launches are held to eager CUDA's emulation, its eager fallbacks (float64
angles, angles that need a gradient) to the CPU's eager path.

Every check that chose a reference records it in the run's metadata (``dsv41_rope.report.REFERENCES``), which the
verdict names; a run on a CPU also records that its verdict says nothing of a GPU's bits (``CPU_VERDICT``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from types import CodeType, FrameType
from typing import Any

import torch

from dsv41_rope.harness.implementation import Judged, judged
from dsv41_rope.report import CPU_VERDICT, REFERENCES

__all__ = [
    "CPU_EAGER",
    "CUDA_EAGER",
    "EMULATED_CUDA",
    "Reference",
    "TritonLaunches",
    "held_to",
    "note",
    "watch_triton_launches",
]

EMULATED_CUDA = "eager CUDA, emulated"
CUDA_EAGER = "eager CUDA"
CPU_EAGER = "eager on the CPU"


@dataclasses.dataclass(frozen=True)
class Reference:
    """What one computation is held to.

    Attributes:
        name: :data:`EMULATED_CUDA`, :data:`CUDA_EAGER` or :data:`CPU_EAGER`.
        device: where the computation ran.
        why: how the reference was chosen, for the report.
    """

    name: str
    device: torch.device
    why: str

    @property
    def emulated(self) -> bool:
        """Whether the oracle's emulation of eager CUDA is the reference (a CPU call that ran Triton code)."""
        return self.name == EMULATED_CUDA

    @property
    def uses_oracle(self) -> bool:
        """Whether comparisons with the oracle apply: always on a GPU (where it is proven equal to eager), and on a
        CPU where it is the reference."""
        return self.device.type == "cuda" or self.emulated

    @property
    def eager_on_device(self) -> bool:
        """Whether the device's own eager path is compared with: always on a GPU, and on a CPU where it is the
        reference."""
        return not self.emulated

    def description(self) -> str:
        """One line for the report and the verdict."""
        if self.name == CUDA_EAGER:
            return f"PyTorch {torch.__version__}'s eager path on {torch.cuda.get_device_name(self.device)}"
        if self.name == EMULATED_CUDA:
            return f"eager CUDA's bits as the oracle emulates them on the CPU: {self.why}"
        return (
            f"this CPU's eager PyTorch path, torch {torch.__version__}, which rounds and keeps NaN payloads as no GPU "
            f"does: {self.why}"
        )


def held_to(device: torch.device, implementation: Judged, launched_triton: bool) -> Reference:
    """The reference a computation on ``device`` is held to, given whether it launched a Triton kernel and the
    implementation's ``--rope-reference`` choice (which applies on a CPU only)."""
    if device.type == "cuda":
        return Reference(CUDA_EAGER, device, "the GPU's own eager path")
    choice = judged(implementation).reference
    if choice == "cuda-emulated":
        return Reference(EMULATED_CUDA, device, "--rope-reference cuda-emulated")
    if choice == "cpu-eager":
        return Reference(CPU_EAGER, device, "--rope-reference cpu-eager")
    if launched_triton:
        return Reference(EMULATED_CUDA, device, "the call launched a Triton kernel, run by Triton's interpreter")
    return Reference(CPU_EAGER, device, "the call ran PyTorch code on the CPU, no Triton kernel")


def note(ulp_drift: Any, reference: Reference, implementation: Judged) -> None:
    """Records ``reference`` in the run's metadata, and for a CPU's what to run on a GPU (no-op without the
    ``ulp_drift`` fixture)."""
    if ulp_drift is None:
        return
    ulp_drift.add_run_metadata(REFERENCES, {reference.name: reference.description()})
    if reference.device.type == "cpu":
        ulp_drift.add_run_metadata(
            CPU_VERDICT,
            "a CPU verdict, which says nothing of a GPU's bits: judge it on a CUDA machine too "
            f"(dsv41-rope certify {judged(implementation).name})",
        )


@dataclasses.dataclass
class TritonLaunches:
    """Whether a Triton kernel was launched while :func:`watch_triton_launches` watched."""

    launched: bool = False


def _launch_entry_points() -> frozenset[CodeType]:
    """The code of the functions every Triton launch passes through: a compiled kernel's ``JITFunction.run`` and,
    under the interpreter, ``InterpretedFunction.run`` and its grid's call (autotuners and heuristics call these)."""
    triton_module = sys.modules.get("triton")
    if triton_module is None:  # nothing imported Triton, so nothing can launch a kernel of it
        return frozenset()
    codes = []
    from triton.runtime import interpreter, jit

    for owner, attribute in (
        (getattr(jit, "JITFunction", None), "run"),
        (getattr(interpreter, "InterpretedFunction", None), "run"),
        (getattr(interpreter, "GridExecutor", None), "__call__"),
    ):
        code = getattr(getattr(owner, attribute, None), "__code__", None)
        if code is not None:
            codes.append(code)
    return frozenset(codes)


@contextlib.contextmanager
def watch_triton_launches() -> Iterator[TritonLaunches]:
    """Watches the calls made in its body (this thread) for a Triton kernel launch.

    A profile function sees every Python call until the first launch, then removes itself, so an interpreted kernel
    runs at its usual speed; whatever profile function was set before is put back at the end."""
    launches = TritonLaunches()
    entry_points = _launch_entry_points()
    previous = sys.getprofile()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_code in entry_points:
            launches.launched = True
            sys.setprofile(None)

    if entry_points:
        sys.setprofile(profile)
    try:
        yield launches
    finally:
        sys.setprofile(previous)
