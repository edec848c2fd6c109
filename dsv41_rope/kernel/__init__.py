"""Fused Triton rotary embedding for DeepSeek V4.1 attention: one launch per call, bit-identical to eager.

A drop-in for the eager ``_apply_rope(values, angles, *, inverse=False)`` of NeMo Automodel's DeepSeek V4.1
attention: the last ``2 * angles.shape[-1]`` channels of ``values`` (``[batch, sequence, channels]`` or
``[batch, sequence, heads, channels]``) are rotated as adjacent complex pairs by ``exp(i * angles)`` (its conjugate
when ``inverse``), the other channels are copied. The eager path streams the tensor through memory several times
(slice, upcast, complex multiply, downcast, clone, copy); the kernel reads each element once and writes it once, and
:func:`apply_rope_triton_` rotates only the rotary channels, in place, for callers that own the tensor.

Numerics follow the eager path of the device bit for bit:

* **The complex multiply** ``(x0 + i x1) * (c + i s)`` is evaluated in float32 the way the device's eager build
  contracts ``c10::complex<float>``'s ``a*c - b*d`` and ``a*d + b*c``: per part, an fma of the first product
  (``first``), of the second (``second``), or both products rounded (``none``). That is nvcc's choice when PyTorch
  is built, so it is *measured*: on first use per CUDA device, :func:`calibrate` runs the device's own eager multiply
  on crafted operands and picks the variant that reproduces it (``first/first`` on the H200 with torch
  2.11.0+cu130). A device whose eager multiply matches no single variant runs the eager path, with a warning.
  ``DSV41_ROPE_CONTRACTION=<real>/<imag>`` forces a variant; under Triton's interpreter the default is the H200's.
* **The frequencies** are ``cos``/``sin`` of the float32 angles, computed in the kernel with libdevice where
  calibration shows they equal ``torch.polar(ones, angles)`` bit for bit on the device (libdevice's ``sinf`` flushes
  subnormal angles, where eager's gives ``sin x = x``; the kernel returns the angle there). Otherwise, and under the
  interpreter, the kernel reads the table of the same ``torch.polar`` call the eager path makes.
  ``DSV41_ROPE_FREQUENCIES=in-kernel|table`` forces one. The conjugate (inverse, and every backward) negates ``s``.
* The float32 result is rounded to the input dtype with round-to-nearest-even, and every NaN the rotation produces
  is the canonical NaN CUDA emits (0x7FFF for BF16/FP16, 0x7FFFFFFF for FP32). Copied channels keep their bits.

On the GPU, BF16/FP16 are widened and narrowed by the hardware's conversions. Triton's interpreter (how this kernel
runs on a CPU, with ``TRITON_INTERPRET=1``) truncates float32 -> bfloat16 and widens bfloat16 subnormals wrongly, so
there the same steps are integer operations on the bit patterns, with the same results.

Inputs whose angles require grad, dtypes outside BF16/FP16/FP32, float64 angles (the eager product is then computed
in complex128), non-CUDA inputs (except under the interpreter) and angle shapes the kernel does not index take the
eager path, :func:`apply_rope_eager`, so every input the eager path accepts gets the eager path's bits. Inputs the
eager path rejects raise a ``ValueError``/``TypeError`` that names the shapes, dtypes or devices involved.

Modules, each one concern: :mod:`.rotary_kernel` (the Triton kernel) and :mod:`.float_ops` (its float32 arithmetic),
:mod:`.configs` with ``tuning.json`` (launch configurations), :mod:`.launch` (plans and launches), :mod:`.calibration`,
:mod:`.eager_path` (the eager reference), :mod:`.inputs` (input checks), :mod:`.operators` (custom operators and
autograd) and :mod:`.api` (the entry points). Imports within the package are relative, so that a copy under another
name (``python -m dsv41_rope.vendor``) works on its own.
"""

from __future__ import annotations

from .api import apply_rope_triton, apply_rope_triton_
from .calibration import (
    CONTRACTION_VARIABLE,
    CONTRACTIONS,
    FREQUENCIES_VARIABLE,
    MEASURED_CONTRACTION,
    Calibration,
    calibrate,
    contraction_probe,
    frequency_probe_angles,
    kernel_frequencies,
    settings,
)
from .configs import LaunchConfig, launch_config
from .eager_path import apply_rope_eager
from .inputs import uses_fused_kernel
from .launch import KernelSettings
from .operators import OPERATOR_NAMESPACE, rotate
from .runtime import HAVE_TRITON

__all__ = [
    "CONTRACTIONS",
    "CONTRACTION_VARIABLE",
    "FREQUENCIES_VARIABLE",
    "HAVE_TRITON",
    "MEASURED_CONTRACTION",
    "OPERATOR_NAMESPACE",
    "Calibration",
    "KernelSettings",
    "LaunchConfig",
    "apply_rope_eager",
    "apply_rope_triton",
    "apply_rope_triton_",
    "calibrate",
    "contraction_probe",
    "frequency_probe_angles",
    "kernel_frequencies",
    "launch_config",
    "rotate",
    "settings",
    "uses_fused_kernel",
]
