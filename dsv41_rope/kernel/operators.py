"""The rotation as PyTorch sees it: one launch with the device's calibrated settings, the custom operators that
torch.compile treats as opaque nodes, and the autograd function whose backward is the rotation by the conjugate."""

from __future__ import annotations

import re

import torch

from .calibration import kernel_settings
from .configs import LaunchConfig
from .eager_path import apply_rope_eager, rotate_in_place_eagerly
from .inputs import check_no_shared_memory, uses_fused_kernel
from .launch import launch_kernel
from .runtime import HAVE_TRITON

__all__ = [
    "OPERATOR_NAMESPACE",
    "FusedRope",
    "rotate",
    "rotate_in_place",
    "rotate_in_place_op",
    "rotate_op",
    "rotate_out_of_place",
]

# torch.library namespace of this package's operators: two copies of the kernel imported under different package
# names (a vendored copy beside this one, a test's mutant) must not replace each other's operators.
OPERATOR_NAMESPACE = "dsv41_rope_" + re.sub(r"\W", "_", __package__ or __name__)


def _angles_3d(angles: torch.Tensor) -> torch.Tensor:
    """``[pairs]`` and ``[sequence, pairs]`` angles (3-D values only) as ``[1, 1 or sequence, pairs]`` views."""
    return angles if angles.dim() == 3 else angles.reshape((1,) * (3 - angles.dim()) + tuple(angles.shape))


def rotate(
    values: torch.Tensor,
    angles: torch.Tensor,
    negate_sin: bool,
    *,
    in_place: bool = False,
    config: LaunchConfig | None = None,
) -> torch.Tensor:
    """Rotate the last ``2 * pairs`` channels of ``values`` by ``angles`` in one kernel launch.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, BF16/FP16/FP32, any
            strides (a transposed ``[B, H, S, D] -> [B, S, H, D]`` view is read in place).
        angles: float32 ``[batch or 1, sequence or 1, pairs]`` (``[pairs]``, ``[sequence, pairs]`` for 3-D values),
            any strides.
        negate_sin: rotate by the conjugate (inverse forward, and every backward).
        in_place: write the rotated channels into ``values`` itself and leave the others untouched.
        config: tile shape and warps; default :func:`.configs.launch_config`.

    Returns:
        A new contiguous tensor shaped and typed like ``values``, or ``values`` when ``in_place``. Where the
        device's eager multiply matches no contraction variant (or is not calibrated yet inside a CUDA-graph
        capture), the eager path's result, with its bits.
    """
    settings = kernel_settings(values.device)
    if settings.contraction is None:
        if in_place:
            rotate_in_place_eagerly(values, angles, negate_sin)
            return values
        return apply_rope_eager(values, angles, inverse=negate_sin)
    output = values if in_place else torch.empty(values.shape, dtype=values.dtype, device=values.device)
    if values.numel() == 0:
        return output
    angles = _angles_3d(angles)
    if settings.in_kernel_frequencies:
        frequencies = angles
    else:
        frequencies = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    launch_kernel(values, frequencies, output, negate_sin=negate_sin, settings=settings, config=config)
    return output


if HAVE_TRITON:
    # The launches as PyTorch operators: torch.compile treats each as one opaque node (no graph break, no tracing into
    # Triton's launcher); the fake implementation gives the output's metadata without running the kernel, and the
    # in-place one declares the tensor it mutates.
    @torch.library.custom_op(f"{OPERATOR_NAMESPACE}::rotate", mutates_args=())
    def rotate_op(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return rotate(values, angles, negate_sin)

    @rotate_op.register_fake
    def _rotate_op_fake(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return torch.empty(values.shape, dtype=values.dtype, device=values.device)

    @torch.library.custom_op(f"{OPERATOR_NAMESPACE}::rotate_", mutates_args=("values",))
    def rotate_in_place_op(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> None:
        rotate_in_place(values, angles, negate_sin)

    @rotate_in_place_op.register_fake
    def _rotate_in_place_op_fake(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> None:
        return None


def rotate_out_of_place(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
    """The out-of-place launch; through its operator only while torch.compile traces (eagerly, the operator's
    dispatch would only add host time)."""
    if torch.compiler.is_compiling():
        return rotate_op(values, angles, negate_sin)
    return rotate(values, angles, negate_sin)


class FusedRope(torch.autograd.Function):
    """Autograd wrapper: the backward is the same one-pass rotation by the conjugate, itself differentiable. It saves
    the angles alone (cos/sin are recomputed, in the kernel or by torch.polar)."""

    @staticmethod
    def forward(ctx: object, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
        """Rotate ``values`` by ``angles`` (conjugated when ``inverse``); see :func:`rotate`."""
        ctx.save_for_backward(angles)
        ctx.inverse = inverse
        return rotate_out_of_place(values, angles, inverse)

    @staticmethod
    def backward(ctx: object, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        """The rotation is orthogonal, so its gradient is the rotation by the conjugate."""
        (angles,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        # Through apply (not rotate) so that the backward is recorded under create_graph and can be
        # differentiated again: it is linear in grad_output, and its own gradient is the forward rotation.
        return FusedRope.apply(grad_output, angles, not ctx.inverse), None, None


def rotate_in_place(values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> None:
    """The in-place rotation, eagerly or as the compiled operator's body: fused, or the eager fallback."""
    check_no_shared_memory(values, angles)
    if not uses_fused_kernel(values, angles):
        rotate_in_place_eagerly(values, angles, inverse)
        return
    rotate(values, angles, inverse, in_place=True)
    torch.autograd.graph.increment_version(values)  # a kernel's writes are invisible to autograd otherwise
