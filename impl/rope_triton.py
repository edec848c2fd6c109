"""Fused Triton rotary embedding for DeepSeek V4.1 attention, forward and backward in one pass each.

A drop-in for the eager ``_apply_rope(values, angles, *, inverse=False)`` of NeMo Automodel's DeepSeek V4.1
attention: the last ``2 * angles.shape[-1]`` channels of ``values`` (``[batch, sequence, channels]`` or
``[batch, sequence, heads, channels]``) are rotated as adjacent complex pairs by ``exp(i * angles)`` (its conjugate
when ``inverse``), the other channels are copied. The eager path streams the tensor through memory several times
(slice, upcast, complex multiply, downcast, clone, copy); the kernel reads each element once and writes it once.

Numerics follow the eager CUDA path bit for bit:

* The frequencies come from the same ``torch.polar(torch.ones_like(angles), angles)`` call the eager path runs, so
  cos/sin are PyTorch's own bits. They are computed once per forward and saved for the backward.
* ``(x0 + i x1) * (c + i s)`` is evaluated as ``r0 = fma(x0, c, -(x1 * s))``, ``r1 = fma(x0, s, x1 * c)``: the
  contraction nvcc gives ``c10::complex<float>``'s multiply (measured on the H200, torch 2.11.0+cu130: 0 mismatches
  in millions of products; fusing the second product instead mismatches about a third). The conjugate (inverse, and
  every backward) only negates ``s``.
* The float32 result is rounded to the input dtype with round-to-nearest-even, and every NaN the rotation produces
  is the canonical NaN CUDA emits (0x7FFF for BF16/FP16, 0x7FFFFFFF for FP32). Copied channels keep their bits.

BF16 is widened and narrowed with integer bit operations rather than casts: Triton's interpreter (how this kernel
runs on a CPU, with ``TRITON_INTERPRET=1``) truncates float32 -> bfloat16 and widens bfloat16 subnormals wrongly,
and the same source must be exact on both.

Inputs whose angles require grad, dtypes outside BF16/FP16/FP32, float64 angles (the eager product is then computed
in complex128), non-CUDA inputs (except under the interpreter) and angle shapes the kernel does not index take the
eager path, :func:`_apply_rope_torch`, so every input the eager path accepts gets the eager path's bits. Inputs the
eager path rejects raise a ``ValueError``/``TypeError`` that names the shapes, dtypes or devices involved.
"""

from __future__ import annotations

import dataclasses
import os

import torch

try:
    import triton

    _HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    _HAVE_TRITON = False
try:
    import triton.language as tl

    _HAVE_TRITON_LANGUAGE = True
except ImportError:  # pragma: no cover
    _HAVE_TRITON_LANGUAGE = False

HAVE_TRITON: bool = bool(_HAVE_TRITON and _HAVE_TRITON_LANGUAGE)

# The most elements one chunk of a program holds (BLOCK_R rows x BLOCK_K channels).
_ELEMENTS_PER_PROGRAM = 4096
_FUSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Row indices are 32-bit in the kernel, with room for the last tile's masked rows.
_MAX_ROWS = 2**31 - 1 - _ELEMENTS_PER_PROGRAM

# Triton reads TRITON_INTERPRET when a kernel is defined; this is the same truth test it applies.
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")


if HAVE_TRITON:

    @triton.jit
    def _to_float32(x):
        """Widen BF16/FP16/FP32 to float32 exactly (BF16 by shifting its bits into the high half)."""
        if x.dtype == tl.bfloat16:
            return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
        else:
            return x.to(tl.float32)

    @triton.jit
    def _from_float32(r, dtype: tl.constexpr):
        """Round float32 to ``dtype`` (nearest even); any NaN becomes the canonical NaN CUDA emits."""
        bits = r.to(tl.uint32, bitcast=True)
        is_nan = (bits & 0x7FFFFFFF) > 0x7F800000
        if dtype == tl.bfloat16:
            # Adding 0x7FFF plus the lowest kept bit carries exactly when the dropped half is above a tie, or a
            # tie with an odd kept half: round-to-nearest-even on the bit pattern, overflow to inf included.
            rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
            return tl.where(is_nan, 0x7FFF, rounded).to(tl.uint16).to(tl.bfloat16, bitcast=True)
        elif dtype == tl.float16:
            rounded = r.to(tl.float16).to(tl.uint16, bitcast=True).to(tl.uint32)
            return tl.where(is_nan, 0x7FFF, rounded).to(tl.uint16).to(tl.float16, bitcast=True)
        else:
            return tl.where(is_nan, 0x7FFFFFFF, bits).to(tl.uint32).to(tl.float32, bitcast=True)

    @triton.jit
    def _negate(x):
        """-x by flipping the sign bit: on the H200 with Triton 3.6, unary minus gave +0 for -(+0) (as 0 - x would)."""
        return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)

    @triton.jit
    def _rotate_tile(
        source,
        target,
        frequency_row,
        local,
        mask,
        NEGATE_SIN: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        """Rotate BLOCK_R rows x BLOCK_K rotary channels: ``source``/``target``/``frequency_row`` point at each
        row's rotary block (``[BLOCK_R, 1]``), ``local`` are channels within it, starting on a whole pair."""
        x = _to_float32(tl.load(source + local[None, :], mask=mask, other=0.0))
        x0, x1 = tl.split(tl.reshape(x, (BLOCK_R, BLOCK_K // 2, 2)))
        frequency = tl.load(frequency_row + local[None, :], mask=mask, other=0.0)
        cos, sin = tl.split(tl.reshape(frequency, (BLOCK_R, BLOCK_K // 2, 2)))
        if NEGATE_SIN:
            sin = _negate(sin)
        # c10::complex<float> multiply as nvcc contracts it on the H200: the first product of each part is fused.
        # Spelled out so the bits do not depend on Triton's fp-fusion default.
        real = tl.fma(x0, cos, _negate(x1 * sin))
        imag = tl.fma(x0, sin, x1 * cos)
        rotated = tl.reshape(tl.join(real, imag), (BLOCK_R, BLOCK_K))
        tl.store(target + local[None, :], _from_float32(rotated, target.dtype.element_ty), mask=mask)

    @triton.jit
    def _row_pointers(
        values_ptr, output_ptr, row, sequence, heads, channels, stride_batch, stride_sequence, stride_head
    ):
        """Each row's first element in values and in the contiguous output (``[BLOCK_R, 1]``), and its position.

        Rows are decomposed in 32 bits (the launcher keeps rows below 2**31; a 64-bit division is a long software
        routine); element offsets are 64-bit: rows * channels exceeds 2**31 for long sequences.
        """
        head = row % heads
        position = (row // heads) % sequence
        batch = row // heads // sequence
        offset = batch.to(tl.int64) * stride_batch + position.to(tl.int64) * stride_sequence
        source = values_ptr + (offset + head.to(tl.int64) * stride_head)[:, None]
        target = output_ptr + (row.to(tl.int64) * channels)[:, None]
        return source, target, position

    @triton.jit
    def _rope_kernel(
        # Pointers: values [batch, sequence, heads, channels] (channels contiguous), frequencies as float32
        # (cos, sin) pairs [sequence, pairs, 2], output contiguous like values.
        values_ptr,
        frequencies_ptr,
        output_ptr,
        # Sizes. rows = batch * sequence * heads; the rotary block is channels [pair_offset, channels).
        rows,
        sequence,
        heads,
        channels,
        pairs,
        pair_offset,
        # Strides of values, in elements.
        stride_batch,
        stride_sequence,
        stride_head,
        # Meta-parameters: NEGATE_SIN selects the conjugate; a program owns BLOCK_R whole rows and moves them in
        # chunks of BLOCK_K channels.
        NEGATE_SIN: tl.constexpr,
        BLOCK_R: tl.constexpr,
        BLOCK_K: tl.constexpr,
    ):
        row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
        source, target, position = _row_pointers(
            values_ptr, output_ptr, row, sequence, heads, channels, stride_batch, stride_sequence, stride_head
        )
        row_ok = (row < rows)[:, None]
        # The copied channels: plain loads and stores, so every bit, NaN payloads included, is kept. Whole chunks
        # are masked by row alone, so their accesses stay full vectors whatever pair_offset is; then the rest.
        whole_chunks_end = pair_offset - pair_offset % BLOCK_K
        rows_mask = tl.broadcast_to(row_ok, (BLOCK_R, BLOCK_K))
        for start in range(0, whole_chunks_end, BLOCK_K):
            channel = start + tl.arange(0, BLOCK_K)
            tl.store(target + channel[None, :], tl.load(source + channel[None, :], mask=rows_mask), mask=rows_mask)
        if whole_chunks_end < pair_offset:
            channel = whole_chunks_end + tl.arange(0, BLOCK_K)
            mask = row_ok & (channel < pair_offset)[None, :]
            tl.store(target + channel[None, :], tl.load(source + channel[None, :], mask=mask), mask=mask)
        # The rotary block, in chunks from its own start, so that a chunk always begins on a whole pair.
        frequency_row = frequencies_ptr + (position.to(tl.int64) * (2 * pairs))[:, None]
        for start in range(0, 2 * pairs, BLOCK_K):
            local = start + tl.arange(0, BLOCK_K)
            mask = row_ok & (local < 2 * pairs)[None, :]
            _rotate_tile(
                source + pair_offset, target + pair_offset, frequency_row, local, mask, NEGATE_SIN, BLOCK_R, BLOCK_K
            )


@dataclasses.dataclass(frozen=True)
class _LaunchConfig:
    """Tile shape and warps of one launch of :func:`_rope_kernel`."""

    block_rows: int
    block_channels: int
    num_warps: int


def _launch_config(rows: int, channels: int, pairs: int, element_size: int) -> _LaunchConfig:
    """Choose rows per program, chunk width and warps for a tensor of ``rows`` x ``channels``.

    From the launch sweep on the H200 (``benchmarks/sweep.py``; docs/benchmarks.md has the figures): chunks of
    2 KiB, with chunks as wide as the row allows (256 channels for rows of 2 KiB and more, 128 from 1 KiB, 64
    below) and 4 warps, one 16-byte vector per thread; rows of 256 bytes or less run on 2 warps. Over the 40 swept
    shapes (channels 64-1024, pairs 1, 32 and C/2, BF16 and FP32) this is 1.3% slower than each shape's best
    configuration on average, at most 12%.
    """
    del pairs  # kept in the signature for the launch-heuristic sweep (benchmarks/sweep.py)
    row_bytes = channels * element_size
    block_channels = 256 if row_bytes >= 2048 else 128 if row_bytes >= 1024 else 64
    block_rows = max(1, 2048 // (block_channels * element_size))
    block_rows = min(block_rows, _ELEMENTS_PER_PROGRAM // block_channels, triton.next_power_of_2(max(rows, 1)))
    return _LaunchConfig(block_rows=block_rows, block_channels=block_channels, num_warps=2 if row_bytes <= 256 else 4)


def _frequency_table(frequencies: torch.Tensor, batch: int, sequence: int) -> torch.Tensor:
    """Float32 (cos, sin) pairs ``[batch or 1, sequence, pairs, 2]``, contiguous, from complex ``[b, s, pairs]``."""
    table = torch.view_as_real(frequencies)
    if table.shape[1] != sequence:  # angles broadcast over the sequence: small, so materialize it
        table = table.expand(table.shape[0], sequence, *table.shape[2:])
    return table.contiguous()


def _launch(values: torch.Tensor, frequencies: torch.Tensor, negate_sin: bool) -> torch.Tensor:
    """Rotate the last ``2 * pairs`` channels of ``values`` by ``frequencies`` in one pass.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, BF16/FP16/FP32, any
            batch/sequence/head strides (a transposed ``[B, H, S, D] -> [B, S, H, D]`` view is read in place).
        frequencies: complex64 ``[batch or 1, sequence or 1, pairs]``, the ``torch.polar`` output.
        negate_sin: rotate by the conjugate (inverse forward, and every backward).

    Returns:
        A new contiguous tensor shaped and typed like ``values``.
    """
    if values.stride(-1) != 1:  # the kernel reads channels contiguously; a channel-strided view is copied first
        values = values.contiguous()
    output = torch.empty(values.shape, dtype=values.dtype, device=values.device)
    if output.numel() == 0:
        return output
    table = _frequency_table(frequencies, values.shape[0], values.shape[1])
    if table.shape[0] > 1 and not _batches_fold(values):
        for index in range(values.shape[0]):  # per-batch frequencies in a layout that cannot fold: launch per batch
            _rotate_into(output[index : index + 1], values[index : index + 1], table[index : index + 1], negate_sin)
    else:
        _rotate_into(output, values, table, negate_sin)
    return output


def _batches_fold(values: torch.Tensor) -> bool:
    """Whether batch and sequence of ``values`` can be read as one dimension of ``batch * sequence`` positions."""
    return values.shape[1] == 1 or values.stride(0) == values.shape[1] * values.stride(1)


def _rotate_into(output: torch.Tensor, values: torch.Tensor, table: torch.Tensor, negate_sin: bool) -> None:
    """One kernel launch writing ``output``; ``table`` is ``[1 or batch, sequence, pairs, 2]`` contiguous float32.

    The kernel indexes the table by position alone (broadcast over batch). Per-batch tables are handled by reading
    batch and sequence as one dimension, which the caller guarantees with :func:`_batches_fold`.
    """
    four_d = values.dim() == 4
    batch, sequence = values.shape[0], values.shape[1]
    heads = values.shape[2] if four_d else 1
    channels, pairs = values.shape[-1], table.shape[-2]
    stride_batch, stride_sequence = values.stride(0), values.stride(1)
    stride_head = values.stride(2) if four_d else 0
    if table.shape[0] > 1:
        stride_sequence = stride_sequence if sequence > 1 else stride_batch
        batch, sequence = 1, batch * sequence
    rows = batch * sequence * heads
    if rows > _MAX_ROWS:  # _uses_fused_kernel sends such tensors to the eager path; this guards direct callers
        raise ValueError(f"the kernel indexes rows in 32 bits: {rows} rows (values {_describe(values)}) is too many")
    config = _launch_config(rows, channels, pairs, values.element_size())
    _rope_kernel[(triton.cdiv(rows, config.block_rows),)](
        values,
        table,
        output,
        rows,
        sequence,
        heads,
        channels,
        pairs,
        channels - 2 * pairs,
        stride_batch,
        stride_sequence,
        stride_head,
        NEGATE_SIN=negate_sin,
        BLOCK_R=config.block_rows,
        BLOCK_K=config.block_channels,
        num_warps=config.num_warps,
    )


if HAVE_TRITON:
    # The launch as a PyTorch operator: torch.compile treats it as one opaque node (no graph break, no tracing into
    # Triton's launcher) and its fake implementation gives the output's metadata without running the kernel.
    @torch.library.custom_op("dsv41_rope::rotate", mutates_args=())
    def _rotate_op(values: torch.Tensor, frequencies: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return _launch(values, frequencies, negate_sin)

    @_rotate_op.register_fake
    def _rotate_op_fake(values: torch.Tensor, frequencies: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return torch.empty(values.shape, dtype=values.dtype, device=values.device)


class _FusedRope(torch.autograd.Function):
    """Autograd wrapper: the backward is the same one-pass rotation by the conjugate, itself differentiable."""

    @staticmethod
    def forward(ctx: object, values: torch.Tensor, frequencies: torch.Tensor, inverse: bool) -> torch.Tensor:
        """Rotate ``values`` by ``frequencies`` (conjugated when ``inverse``); see :func:`_launch`."""
        ctx.save_for_backward(frequencies)
        ctx.inverse = inverse
        # The operator is what torch.compile traces; run eagerly, its dispatch would only add host time.
        if torch.compiler.is_compiling():
            return _rotate_op(values, frequencies, inverse)
        return _launch(values, frequencies, negate_sin=inverse)

    @staticmethod
    def backward(ctx: object, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        """The rotation is orthogonal, so its gradient is the rotation by the conjugate."""
        (frequencies,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        # Through apply (not _launch) so that the backward is recorded under create_graph and can be
        # differentiated again: it is linear in grad_output, and its own gradient is the forward rotation.
        return _FusedRope.apply(grad_output, frequencies, not ctx.inverse), None, None


def _apply_rope_torch(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The eager reference: Automodel's ``_apply_rope`` (``deepseek_v41/attention.py``), step for step.

    Every step is kept, ``.contiguous()`` included: which CUDA kernel PyTorch runs for the complex multiply (and for
    its backward) depends on its operands' layout, so for FP32 values, where ``.float()`` is a no-op, skipping the
    copy would hand the multiply a strided view and could change the path the bits come from.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``.
        angles: ``[batch or 1, sequence, pairs]``, broadcastable against the rotary block's pairs.
        inverse: rotate by the conjugate.

    Returns:
        A new contiguous tensor: ``values`` with its last ``2 * pairs`` channels rotated.
    """
    rotary_dim = angles.shape[-1] * 2
    complex_pairs = torch.view_as_complex(values[..., -rotary_dim:].float().unflatten(-1, (-1, 2)).contiguous())
    frequencies = torch.polar(torch.ones_like(angles), angles)
    if values.dim() == 4:
        frequencies = frequencies.unsqueeze(2)
    if inverse:
        frequencies = frequencies.conj()
    rotated = torch.view_as_real(complex_pairs * frequencies).flatten(-2).to(values.dtype)
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., -rotary_dim:] = rotated
    return output


def _describe(tensor: torch.Tensor) -> str:
    return f"{tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')} on {tensor.device}"


def _check_inputs(values: object, angles: object, inverse: object) -> None:
    """Raise a clear error for every input the eager path rejects (or accepts only by accident of slicing)."""
    if not isinstance(values, torch.Tensor) or not isinstance(angles, torch.Tensor):
        raise TypeError(f"values and angles must be tensors, got {type(values).__name__} and {type(angles).__name__}")
    if not isinstance(inverse, bool):
        raise TypeError(f"inverse must be a bool, got {type(inverse).__name__}")
    if values.dim() not in (3, 4):
        raise ValueError(
            f"values must be [batch, sequence, channels] or [batch, sequence, heads, channels], got {_describe(values)}"
        )
    if not values.is_floating_point():
        raise TypeError(f"values must be a floating-point tensor, got {_describe(values)}")
    if angles.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"angles must be float32 or float64 (torch.polar's dtypes), got {_describe(angles)}")
    if values.device != angles.device:
        raise ValueError(f"values and angles must be on one device, got {_describe(values)} and {_describe(angles)}")
    if angles.dim() == 0:
        raise ValueError(f"angles must have a last dimension of rotary pairs, got {_describe(angles)}")
    pairs, channels = angles.shape[-1], values.shape[-1]
    if pairs == 0 or 2 * pairs > channels:
        raise ValueError(
            f"angles' last dimension is the number of rotary pairs and must satisfy 1 <= 2 * pairs <= channels; "
            f"got pairs={pairs} for values {_describe(values)}, angles {_describe(angles)}"
        )
    rotary_shape = (*values.shape[:-1], pairs)
    frequency_shape = list(angles.shape)
    if values.dim() == 4:
        if angles.dim() < 2:
            raise ValueError(
                f"angles for 4-D values must be [batch, sequence, pairs], got {_describe(angles)} "
                f"for values {_describe(values)}"
            )
        frequency_shape.insert(2, 1)  # the eager path unsqueezes the heads dimension
    if not _broadcasts_to(frequency_shape, rotary_shape):
        raise ValueError(
            f"angles {_describe(angles)} do not broadcast to the rotary pairs {rotary_shape} of values "
            f"{_describe(values)}: expected angles [batch or 1, sequence or 1, {pairs}]"
        )


def _broadcasts_to(shape: list[int], target: tuple[int, ...]) -> bool:
    """Whether ``shape`` broadcasts to ``target`` without enlarging it (``torch.broadcast_shapes`` costs ~10 us)."""
    return len(shape) <= len(target) and all(
        size == wanted or size == 1 for size, wanted in zip(reversed(shape), reversed(target), strict=False)
    )


def _uses_fused_kernel(values: torch.Tensor, angles: torch.Tensor) -> bool:
    """Whether :func:`apply_rope_triton` runs the kernel for these (valid) inputs rather than the eager path."""
    on_kernel_device = values.is_cuda or (_INTERPRETED and values.device.type == "cpu")
    indexable_angles = angles.dim() == 3 or (values.dim() == 3 and angles.dim() in (1, 2))
    return (
        values.numel() // max(values.shape[-1], 1) <= _MAX_ROWS
        and HAVE_TRITON
        and on_kernel_device
        and values.dtype in _FUSED_DTYPES
        and angles.dtype == torch.float32
        and not (angles.requires_grad and torch.is_grad_enabled())
        and indexable_angles
    )


def apply_rope_triton(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotary embedding of the last ``2 * angles.shape[-1]`` channels, bit-identical to the eager path.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``; any batch, sequence and
            head strides.
        angles: ``[batch or 1, sequence or 1, pairs]`` (for 3-D values also ``[sequence, pairs]`` or ``[pairs]``).
        inverse: rotate by ``exp(-i * angles)``.

    Returns:
        A new contiguous tensor: ``values`` with its last ``2 * pairs`` channels rotated as adjacent complex pairs.

    Raises:
        TypeError: non-tensor inputs, a non-bool ``inverse``, non-floating values, or angles not float32/float64.
        ValueError: wrong ranks, ``pairs == 0`` or ``2 * pairs > channels``, angles that do not broadcast to the
            rotary pairs without enlarging ``values``, or inputs on different devices.
    """
    _check_inputs(values, angles, inverse)
    if not _uses_fused_kernel(values, angles):
        return _apply_rope_torch(values, angles, inverse)
    angles = angles.reshape((1,) * (3 - angles.dim()) + tuple(angles.shape))
    frequencies = torch.polar(torch.ones_like(angles), angles)
    return _FusedRope.apply(values, frequencies, inverse)
