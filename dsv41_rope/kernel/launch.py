"""One launch of the kernel: its grid and scalar arguments worked out once per tensor signature (a plan), then the
compiled kernel launched directly on later calls, as Triton's fused-softmax tutorial does."""

from __future__ import annotations

import dataclasses

import torch

from .configs import MAX_ROWS, LaunchConfig, launch_config, shares_frequencies
from .inputs import describe
from .runtime import HAVE_TRITON, INTERPRETED, triton

if HAVE_TRITON:
    from .rotary_kernel import rope_kernel

__all__ = [
    "FLOAT32_SIGN_BIT",
    "KERNEL_SCALARS",
    "MAX_PLANS",
    "PLANS",
    "KernelSettings",
    "Plan",
    "division_magic",
    "frequency_strides",
    "launch_kernel",
    "make_plan",
    "strides_as_indexed",
]

# The kernel's sin_sign for the conjugate: float32's sign bit as an int32 (Triton passes 2**31 as an int64, which
# would compile a second kernel).
FLOAT32_SIGN_BIT = -(2**31)


@dataclasses.dataclass(frozen=True)
class KernelSettings:
    """How the kernel reproduces a device's eager path: the contraction of each part of the complex multiply
    (``(real, imag)``, or None where no variant reproduces the device: the eager path then runs), whether cos/sin
    are computed in the kernel, and where these settings came from."""

    contraction: tuple[str, str] | None
    in_kernel_frequencies: bool
    source: str

    def describe(self) -> str:
        """One line for logs and reports, e.g. ``first/first, frequencies in kernel (calibrated)``."""
        variant = "/".join(self.contraction) if self.contraction else "eager path (no contraction variant matches)"
        frequencies = "frequencies in kernel" if self.in_kernel_frequencies else "frequencies from torch.polar"
        return f"{variant}, {frequencies} ({self.source})"


@dataclasses.dataclass
class Plan:
    """A launch worked out once per shape/stride/dtype/alignment signature: grid, scalar arguments, and (on CUDA)
    the compiled kernel, launched directly on later calls as Triton's fused-softmax tutorial does."""

    grid: tuple[int, int, int]  # the compiled kernel's runner wants all three dimensions
    scalars: dict[str, object]
    num_warps: int
    compiled: object = None

    def launch(self, values: torch.Tensor, frequencies: torch.Tensor, output: torch.Tensor) -> None:
        if self.compiled is not None:
            self.compiled[self.grid](values, frequencies, output, *self.scalars.values())
            return
        compiled = rope_kernel[self.grid](values, frequencies, output, **self.scalars, num_warps=self.num_warps)
        # The compiled kernel takes every parameter positionally, in the kernel's order (constexprs included).
        if not INTERPRETED and hasattr(compiled, "__getitem__") and list(self.scalars) == KERNEL_SCALARS:
            self.compiled = compiled


# The kernel's parameters after its three pointers, in order.
KERNEL_SCALARS = list(getattr(rope_kernel, "arg_names", ())[3:]) if HAVE_TRITON else []
PLANS: dict[tuple, Plan] = {}
MAX_PLANS = 4096


def strides_as_indexed(tensor: torch.Tensor, dims: int) -> tuple[int, ...]:
    """The strides of ``tensor``'s first ``dims`` dimensions as the kernel indexes them: 0 for a size-1 dimension,
    whose index is always 0. Its stride addresses nothing, and passing it would give layouts that differ only there
    (a one-token step sliced from a longer buffer, say) compiled kernels of their own: Triton specializes integer
    arguments on their value (1, or divisible by 16)."""
    return tuple(
        stride if size > 1 else 0 for size, stride in zip(tensor.shape[:dims], tensor.stride()[:dims], strict=True)
    )


def frequency_strides(frequencies: torch.Tensor) -> tuple[int, int, int]:
    """Batch, sequence and pair strides of ``[b, s, pairs(, 2)]`` frequencies; 0 where they broadcast (size 1)."""
    return strides_as_indexed(frequencies, 3)


def launch_kernel(
    values: torch.Tensor,
    frequencies: torch.Tensor,
    output: torch.Tensor,
    *,
    negate_sin: bool,
    settings: KernelSettings,
    config: LaunchConfig | None = None,
) -> None:
    """One launch of :func:`rope_kernel` writing ``output`` (a new tensor, or ``values`` itself in place).

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, any strides.
        frequencies: float32 angles ``[batch or 1, sequence or 1, pairs]`` (``settings.in_kernel_frequencies``), or
            torch.polar's pairs ``[batch or 1, sequence or 1, pairs, 2]`` with cos and sin adjacent.
        output: shaped like ``values``; ``values`` itself rotates in place and copies nothing.
        negate_sin: rotate by the conjugate.
        settings: the contraction variant and frequency source (``settings.contraction`` must not be None).
        config: tile shape and warps; default :func:`launch_config`.
    """
    key = (
        values.device,
        values.dtype,
        values.shape,
        values.stride(),
        frequencies.shape,
        frequencies.stride(),
        output is values,
        negate_sin,
        settings.contraction,
        settings.in_kernel_frequencies,
        config,
        # Triton specializes pointers on 16-byte alignment: a plan is only valid for the same alignments.
        values.data_ptr() % 16,
        frequencies.data_ptr() % 16,
        output.data_ptr() % 16,
    )
    plan = PLANS.get(key)
    if plan is None:
        plan = make_plan(values, frequencies, output, negate_sin, settings, config)
        if len(PLANS) >= MAX_PLANS:
            PLANS.clear()
        PLANS[key] = plan
    if values.is_cuda and values.device.index != torch.cuda.current_device():
        with torch.cuda.device(values.device):  # Triton launches on the current device's stream
            plan.launch(values, frequencies, output)
    else:
        plan.launch(values, frequencies, output)


def make_plan(
    values: torch.Tensor,
    frequencies: torch.Tensor,
    output: torch.Tensor,
    negate_sin: bool,
    settings: KernelSettings,
    config: LaunchConfig | None,
) -> Plan:
    four_d = values.dim() == 4
    batch, sequence = values.shape[0], values.shape[1]
    heads = values.shape[2] if four_d else 1
    channels, pairs = values.shape[-1], frequencies.shape[2]
    rows = batch * sequence * heads
    if rows > MAX_ROWS:  # uses_fused_kernel sends such tensors to the eager path; this guards direct callers
        raise ValueError(f"the kernel indexes rows in 32 bits: {rows} rows (values {describe(values)}) is too many")
    config = config or launch_config(rows, channels, pairs, values.element_size(), heads, in_place=output is values)
    programs_per_batch = triton.cdiv(sequence * heads, config.block_rows)

    def strides(tensor: torch.Tensor) -> tuple[int, int, int, int]:
        batch, sequence, *head = strides_as_indexed(tensor, 3 if four_d else 2)
        return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)

    frequency_batch, frequency_sequence, frequency_pair = frequency_strides(frequencies)
    names = ("stride_values_batch", "stride_values_sequence", "stride_values_head", "stride_values_channel")
    output_names = ("stride_output_batch", "stride_output_sequence", "stride_output_head", "stride_output_channel")
    scalars = {
        "programs_per_batch": programs_per_batch,
        **dict(zip(("batch_magic", "batch_shift"), division_magic(programs_per_batch), strict=True)),
        "sequence": sequence,
        "heads": heads,
        "pairs": pairs,
        "pair_offset": channels - 2 * pairs,
        "sin_sign": FLOAT32_SIGN_BIT if negate_sin else 0,
        **dict(zip(names, strides(values), strict=True)),
        **dict(zip(output_names, strides(output), strict=True)),
        "stride_frequencies_batch": frequency_batch,
        "stride_frequencies_sequence": frequency_sequence,
        "stride_frequencies_pair": frequency_pair,
        "COPY_CHANNELS": output is not values,
        "IN_KERNEL_FREQUENCIES": settings.in_kernel_frequencies,
        "SHARED_FREQUENCIES": shares_frequencies(heads, config.block_rows),
        "REAL": settings.contraction[0],
        "IMAG": settings.contraction[1],
        "BLOCK_R": config.block_rows,
        "COPY_K": config.copy_channels,
        "ROTARY_K": config.rotary_channels,
    }
    grid = (batch * programs_per_batch, 1, 1)
    return Plan(grid=grid, scalars=scalars, num_warps=config.num_warps)


def division_magic(divisor: int) -> tuple[int, int]:
    """The kernel's division by ``divisor`` (1 to 2**31 - 1) as a multiply-high: ``(magic, shift)`` with
    ``n // divisor == (umulhi(n, magic) + n) >> shift`` for every ``0 <= n < 2**31``, ``umulhi`` the high 32 bits of
    the unsigned product and the sum taken in 33 bits (it stays below 2**32).

    With ``shift = ceil(log2(divisor))``, ``2**32 + magic = ceil(2**(32 + shift) / divisor)`` exceeds
    ``2**(32 + shift) / divisor`` by ``e < 1``, so the quotient computed is ``floor(n / divisor + n * e / 2**(32 +
    shift))``, and the second term, below ``2**-shift <= 1 / divisor``, cannot carry ``n / divisor`` past its floor
    (Granlund and Montgomery, "Division by invariant integers using multiplication", 1994). The magic number is
    returned as an int32 (its bits: Triton would pass 2**31 and up as an int64 and compile another kernel).
    """
    if not 1 <= divisor < 2**31:
        raise ValueError(f"the kernel divides by 1 to 2**31 - 1 in 32 bits, not by {divisor}")
    shift = (divisor - 1).bit_length()
    magic = -(-(1 << (32 + shift)) // divisor) - (1 << 32)
    return magic - (1 << 32) if magic >= 1 << 31 else magic, shift
