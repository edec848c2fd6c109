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
eager path, :func:`_apply_rope_torch`, so every input the eager path accepts gets the eager path's bits. Inputs the
eager path rejects raise a ``ValueError``/``TypeError`` that names the shapes, dtypes or devices involved.
"""

from __future__ import annotations

import dataclasses
import os
import re
import warnings

import torch

try:
    import triton

    _HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    _HAVE_TRITON = False
try:
    import triton.language as tl
    from triton.language.extra import libdevice

    _HAVE_TRITON_LANGUAGE = True
except ImportError:  # pragma: no cover
    _HAVE_TRITON_LANGUAGE = False

HAVE_TRITON: bool = bool(_HAVE_TRITON and _HAVE_TRITON_LANGUAGE)

# The most elements one chunk of a program holds (BLOCK_R rows x chunk channels).
_ELEMENTS_PER_PROGRAM = 4096
_FUSED_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# Row indices are 32-bit in the kernel, with room for the last tile's masked rows.
_MAX_ROWS = 2**31 - 1 - _ELEMENTS_PER_PROGRAM
# The kernel's sin_sign for the conjugate: float32's sign bit as an int32 (Triton passes 2**31 as an int64, which
# would compile a second kernel).
_FLOAT32_SIGN_BIT = -(2**31)

# Triton reads TRITON_INTERPRET when a kernel is defined; this is the same truth test it applies.
_INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")

CONTRACTIONS = ("first", "second", "none")
# The eager CUDA contraction measured on the H200 (torch 2.11.0+cu130): the default where nothing is calibrated.
MEASURED_CONTRACTION = ("first", "first")
CONTRACTION_VARIABLE = "DSV41_ROPE_CONTRACTION"
FREQUENCIES_VARIABLE = "DSV41_ROPE_FREQUENCIES"
_FREQUENCY_SOURCES = {"in-kernel": True, "table": False}
# torch.library namespace of this module's operators: two copies of the file imported under different module names
# (a vendored copy beside this one, a test's mutant) must not replace each other's operators.
_OPERATOR_NAMESPACE = "dsv41_rope_" + re.sub(r"\W", "_", __name__)


if HAVE_TRITON:

    @triton.jit
    def _negate(x):
        """-x by flipping the sign bit: on the H200 with Triton 3.6, unary minus gave +0 for -(+0) (as 0 - x would)."""
        return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)

    @triton.jit
    def _flip_sign(x, sign_bit):
        """``x`` with its sign bit XORed with ``sign_bit`` (0: ``x``; the int32 sign bit: ``_negate(x)``)."""
        return (x.to(tl.int32, bitcast=True) ^ sign_bit).to(tl.float32, bitcast=True)

    if _INTERPRETED:

        @triton.jit
        def _to_float32(x):
            """Widen BF16/FP16/FP32 to float32 exactly. The interpreter widens BF16 subnormals wrongly, so BF16 is
            widened by shifting its bits into the high half."""
            if x.dtype == tl.bfloat16:
                return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
            else:
                return x.to(tl.float32)

        @triton.jit
        def _from_float32(r, dtype: tl.constexpr):
            """Round float32 to ``dtype`` (nearest even) on the bit pattern, since the interpreter's BF16 cast
            truncates; any NaN becomes the canonical NaN CUDA emits."""
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
        def _rounded_product(a, b):
            """``a * b`` rounded once (numpy, which the interpreter runs, never contracts it)."""
            return a * b

        @triton.jit
        def _cos_sin(angle):
            """cos and sin of float32 angles (numpy's under the interpreter); ``sin x = x`` for subnormal x."""
            subnormal = (angle.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) < 0x00800000
            return tl.cos(angle), tl.where(subnormal, angle, tl.sin(angle))

    else:

        @triton.jit
        def _to_float32(x):
            """Widen BF16/FP16/FP32 to float32: exact on the GPU, one conversion instruction."""
            return x.to(tl.float32)

        @triton.jit
        def _from_float32(r, dtype: tl.constexpr):
            """Round float32 to ``dtype`` with the GPU's round-to-nearest-even conversion. Every NaN of the rotation
            comes out of the GPU's fma or multiply as the canonical float32 NaN, which converts to CUDA's canonical
            0x7FFF: no step of its own canonicalizes (on the H200 the suite's NaN inputs, payloads included, give
            eager's bits in every forward comparison)."""
            return r.to(dtype)

        @triton.jit
        def _rounded_product(a, b):
            """``a * b`` rounded once. PTX's ``mul`` with an explicit rounding mode is never contracted into a
            neighbouring add, which Triton's default fp-fusion would otherwise do; libdevice's ``__nv_fmul_rn`` is no
            substitute: Triton links libdevice with flush-to-zero, so it flushes subnormals (seen on the H200)."""
            return tl.inline_asm_elementwise(
                "mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1
            )

        @triton.jit
        def _cos_sin(angle):
            """cos and sin of float32 angles with libdevice, as eager CUDA computes them. Triton links libdevice
            with flush-to-zero, so its ``sinf`` returns 0 for subnormal angles, where eager returns the angle."""
            subnormal = (angle.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) < 0x00800000
            return libdevice.cos(angle), tl.where(subnormal, angle, libdevice.sin(angle))

    @triton.jit
    def _complex_multiply(x0, x1, cos, sin, REAL: tl.constexpr, IMAG: tl.constexpr):
        """``(x0 + i x1) * (cos + i sin)`` in float32, each part contracted as REAL/IMAG say: the first product
        fused (``first``), the second fused (``second``), or both rounded (``none``)."""
        if REAL == "first":
            real = tl.fma(x0, cos, _negate(_rounded_product(x1, sin)))
        elif REAL == "second":
            real = tl.fma(_negate(x1), sin, _rounded_product(x0, cos))
        else:
            real = _rounded_product(x0, cos) - _rounded_product(x1, sin)
        if IMAG == "first":
            imag = tl.fma(x0, sin, _rounded_product(x1, cos))
        elif IMAG == "second":
            imag = tl.fma(x1, cos, _rounded_product(x0, sin))
        else:
            imag = _rounded_product(x0, sin) + _rounded_product(x1, cos)
        return real, imag

    @triton.jit
    def _divide(dividend, magic, shift):
        """``dividend // divisor`` for ``0 <= dividend < 2**31``, given ``(magic, shift) = _division_magic(divisor)``.
        The sum exceeds int32's range for large dividends (it stays below 2**32), so it is shifted as unsigned."""
        total = tl.umulhi(dividend, magic) + dividend  # umulhi: of the unsigned product
        return (total.to(tl.uint32, bitcast=True) >> shift).to(tl.int32, bitcast=True)

    @triton.jit
    def _row_offset(batch, position, head, stride_batch, stride_sequence, stride_head):
        """Element offset of each row's start (``[BLOCK_R, 1]``, 64-bit: rows * channels exceeds 2**31)."""
        offset = batch.to(tl.int64) * stride_batch + position.to(tl.int64) * stride_sequence
        return (offset + head.to(tl.int64) * stride_head)[:, None]

    @triton.jit
    def _copy_channels(
        source, target, count, stride_source, stride_target, row_ok, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr
    ):
        """Copy channels ``[0, count)`` of each row with plain loads and stores (every bit kept, NaN payloads too).
        Whole chunks are masked by row alone, so their accesses stay full vectors; then the remainder. Chunk starts
        are written as ``chunk * BLOCK_K``: Triton then knows they are multiples of BLOCK_K (aligned vectors), which
        it does not infer for a loop counter stepping by BLOCK_K (16-bit accesses on the H200, Triton 3.6)."""
        whole_chunks = count // BLOCK_K
        rows_mask = tl.broadcast_to(row_ok, (BLOCK_R, BLOCK_K))
        for chunk in range(0, whole_chunks):
            channel = (chunk * BLOCK_K + tl.arange(0, BLOCK_K))[None, :]
            tl.store(
                target + channel * stride_target,
                tl.load(source + channel * stride_source, mask=rows_mask),
                mask=rows_mask,
            )
        if whole_chunks * BLOCK_K < count:
            channel = whole_chunks * BLOCK_K + tl.arange(0, BLOCK_K)
            mask = row_ok & (channel < count)[None, :]
            channel = channel[None, :]
            tl.store(target + channel * stride_target, tl.load(source + channel * stride_source, mask=mask), mask=mask)

    @triton.jit
    def _load_rotary_chunk(
        source,
        frequency_row,
        start,
        pairs,
        stride_source,
        stride_frequency,
        row_ok,
        frequency_ok,
        IN_KERNEL_FREQUENCIES: tl.constexpr,
        BLOCK_R: tl.constexpr,
        ROTARY_K: tl.constexpr,
    ):
        """Load rotary channels ``[start, start + ROTARY_K)`` of BLOCK_R rows (``start`` is even, so the chunk holds
        whole pairs) and their frequencies at ``frequency_row`` (one per row, or one row shared by all): the two
        parts of the chunk's ``ROTARY_K // 2`` pairs in float32, and the angles twice (``IN_KERNEL_FREQUENCIES``) or
        torch.polar's cos and sin. Loads only: cos/sin are computed where they are used (:func:`_store_rotated`), so
        that no branch of libdevice's stands between these loads and those the caller issues next.

        The chunk is loaded once, as a ``[BLOCK_R, ROTARY_K]`` tile of full vectors, and split into the two parts of
        its pairs."""
        channel = start + tl.arange(0, ROTARY_K)
        mask = row_ok & (channel < 2 * pairs)[None, :]
        x = _to_float32(tl.load(source + channel[None, :] * stride_source, mask=mask, other=0.0))
        x0, x1 = tl.split(tl.reshape(x, (BLOCK_R, ROTARY_K // 2, 2)))
        pair = start // 2 + tl.arange(0, ROTARY_K // 2)
        frequency = frequency_row + pair[None, :] * stride_frequency
        frequency_mask = frequency_ok & (pair < pairs)[None, :]
        if IN_KERNEL_FREQUENCIES:
            angle = tl.load(frequency, mask=frequency_mask, other=0.0)
            return x0, x1, angle, angle
        else:  # torch.polar's (cos, sin) pairs, sin next to cos
            cos = tl.load(frequency, mask=frequency_mask, other=0.0)
            return x0, x1, cos, tl.load(frequency + 1, mask=frequency_mask, other=0.0)

    @triton.jit
    def _store_rotated(
        target,
        start,
        pairs,
        stride_target,
        row_ok,
        x0,
        x1,
        cos_or_angle,
        sin_or_angle,
        sin_sign,
        IN_PLACE: tl.constexpr,
        IN_KERNEL_FREQUENCIES: tl.constexpr,
        REAL: tl.constexpr,
        IMAG: tl.constexpr,
        BLOCK_R: tl.constexpr,
        ROTARY_K: tl.constexpr,
    ):
        """Rotate a chunk :func:`_load_rotary_chunk` loaded and store it at the same channels of ``target``: the pair
        ``(x0, x1)`` times ``(cos, ±sin)`` (``sin_sign`` flips sin's sign for the conjugate), joined back into a tile
        of the loaded layout. In place, every thread's loads precede every store of the chunk (a barrier), whichever
        threads the split moved the parts of a pair to."""
        if IN_KERNEL_FREQUENCIES:
            cos, sin = _cos_sin(cos_or_angle)
        else:
            cos, sin = cos_or_angle, sin_or_angle
        sin = _flip_sign(sin, sin_sign)
        cos = tl.broadcast_to(cos, (BLOCK_R, ROTARY_K // 2))
        sin = tl.broadcast_to(sin, (BLOCK_R, ROTARY_K // 2))
        real, imag = _complex_multiply(x0, x1, cos, sin, REAL, IMAG)
        rotated = _from_float32(tl.reshape(tl.join(real, imag), (BLOCK_R, ROTARY_K)), target.dtype.element_ty)
        channel = start + tl.arange(0, ROTARY_K)
        mask = row_ok & (channel < 2 * pairs)[None, :]
        if IN_PLACE:
            tl.debug_barrier()
        tl.store(target + channel[None, :] * stride_target, rotated, mask=mask)

    # Triton would specialize the magic number and shift on their values (1, multiples of 16) and so build more kernels
    # for the same shapes.
    @triton.jit(do_not_specialize=["batch_magic", "batch_shift"])
    def _rope_kernel(
        # Pointers: values [batch, sequence, heads, channels]; frequencies [batch or 1, sequence or 1, pairs] float32
        # angles, or torch.polar's (cos, sin) pairs [..., pairs, 2]; output shaped like values (values itself when
        # rotating in place).
        values_ptr,
        frequencies_ptr,
        output_ptr,
        # Sizes. Each batch element's sequence * heads rows take programs_per_batch programs (division by it: the
        # magic number and shift of _division_magic); the rotary block is channels [pair_offset, pair_offset + 2 *
        # pairs).
        programs_per_batch,
        batch_magic,
        batch_shift,
        sequence,
        heads,
        pairs,
        pair_offset,
        # 0, or the float32 sign bit (as an int32) to rotate by the conjugate: a value, not a constexpr, so that one
        # compiled kernel serves a tensor's forward, inverse and backward.
        sin_sign,
        # Strides, in elements; a dimension the frequencies broadcast over has stride 0.
        stride_values_batch,
        stride_values_sequence,
        stride_values_head,
        stride_values_channel,
        stride_output_batch,
        stride_output_sequence,
        stride_output_head,
        stride_output_channel,
        stride_frequencies_batch,
        stride_frequencies_sequence,
        stride_frequencies_pair,
        # Meta-parameters. COPY_CHANNELS: out of place, the channels before the rotary block are copied too.
        # IN_KERNEL_FREQUENCIES: frequencies holds angles and cos/sin are computed here. SHARED_FREQUENCIES: BLOCK_R
        # divides heads, so a program's rows share one position (and its cos/sin).
        # REAL/IMAG: the contraction of each part of the complex multiply. A program owns BLOCK_R whole rows and
        # moves them in chunks of COPY_K copied and ROTARY_K rotary channels.
        COPY_CHANNELS: tl.constexpr,
        IN_KERNEL_FREQUENCIES: tl.constexpr,
        SHARED_FREQUENCIES: tl.constexpr,
        REAL: tl.constexpr,
        IMAG: tl.constexpr,
        BLOCK_R: tl.constexpr,
        COPY_K: tl.constexpr,
        ROTARY_K: tl.constexpr,
    ):
        # A program owns BLOCK_R rows of one batch element: its batch is the program id divided by programs_per_batch
        # (a multiply-high, an add and a shift: a division is some 25 dependent instructions before the first load),
        # and a row's position and head are divisions by ``heads`` alone (none where heads is 1), never by the sequence
        # length. In 32 bits (the launcher keeps rows below 2**31; a 64-bit division is a long software routine);
        # offsets are 64-bit.
        program = tl.program_id(0)
        batch = _divide(program, batch_magic, batch_shift)
        first_row = (program - batch * programs_per_batch) * BLOCK_R  # of the batch element's rows
        row = first_row + tl.arange(0, BLOCK_R)
        row_ok = (row < sequence * heads)[:, None]
        position = row // heads
        head = row % heads
        source = values_ptr + _row_offset(
            batch, position, head, stride_values_batch, stride_values_sequence, stride_values_head
        )
        target = output_ptr + _row_offset(
            batch, position, head, stride_output_batch, stride_output_sequence, stride_output_head
        )
        if SHARED_FREQUENCIES:  # BLOCK_R divides heads: the rows are heads of one position, and share its cos/sin
            frequency_position = first_row // heads + tl.zeros((1,), dtype=tl.int32)
        else:
            frequency_position = position
        frequency_row = frequencies_ptr + _row_offset(
            batch, frequency_position, frequency_position, stride_frequencies_batch, stride_frequencies_sequence, 0
        )
        frequency_ok = (frequency_position < sequence)[:, None]
        rotary_source = source + pair_offset * stride_values_channel
        rotary_target = target + pair_offset * stride_output_channel
        # The rotary block's first chunk is loaded before the copy: a load that follows a store in the program is
        # issued only once the store's data has arrived, so loading it after the copy would put a second memory round
        # trip on every program's path (the small tensors' time is mostly such latency).
        x0, x1, cos_or_angle, sin_or_angle = _load_rotary_chunk(
            rotary_source,
            frequency_row,
            0,
            pairs,
            stride_values_channel,
            stride_frequencies_pair,
            row_ok,
            frequency_ok,
            IN_KERNEL_FREQUENCIES,
            BLOCK_R,
            ROTARY_K,
        )
        if COPY_CHANNELS:
            _copy_channels(
                source, target, pair_offset, stride_values_channel, stride_output_channel, row_ok, BLOCK_R, COPY_K
            )
        _store_rotated(
            rotary_target,
            0,
            pairs,
            stride_output_channel,
            row_ok,
            x0,
            x1,
            cos_or_angle,
            sin_or_angle,
            sin_sign,
            not COPY_CHANNELS,
            IN_KERNEL_FREQUENCIES,
            REAL,
            IMAG,
            BLOCK_R,
            ROTARY_K,
        )
        for chunk in range(1, tl.cdiv(2 * pairs, ROTARY_K)):  # chunk * ROTARY_K: aligned, as in _copy_channels
            x0, x1, cos_or_angle, sin_or_angle = _load_rotary_chunk(
                rotary_source,
                frequency_row,
                chunk * ROTARY_K,
                pairs,
                stride_values_channel,
                stride_frequencies_pair,
                row_ok,
                frequency_ok,
                IN_KERNEL_FREQUENCIES,
                BLOCK_R,
                ROTARY_K,
            )
            _store_rotated(
                rotary_target,
                chunk * ROTARY_K,
                pairs,
                stride_output_channel,
                row_ok,
                x0,
                x1,
                cos_or_angle,
                sin_or_angle,
                sin_sign,
                not COPY_CHANNELS,
                IN_KERNEL_FREQUENCIES,
                REAL,
                IMAG,
                BLOCK_R,
                ROTARY_K,
            )

    @triton.jit
    def _frequencies_kernel(angles_ptr, output_ptr, count, BLOCK: tl.constexpr):
        """The kernel's own (cos, sin) of ``count`` float32 angles, as ``[count, 2]`` pairs (calibration and tests)."""
        index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = index < count
        cos, sin = _cos_sin(tl.load(angles_ptr + index, mask=mask, other=0.0))
        pair_offsets = index[:, None] * 2 + tl.arange(0, 2)[None, :]
        tl.store(output_ptr + pair_offsets, tl.join(cos, sin), mask=mask[:, None])


# -- launch ------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and warps of one launch of :func:`_rope_kernel`: ``block_rows`` whole rows per program, moved in
    chunks of ``copy_channels`` copied and ``rotary_channels`` rotary channels (powers of two)."""

    block_rows: int
    copy_channels: int
    rotary_channels: int
    num_warps: int


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


# The fastest configurations of the H200 sweeps on DeepSeek V4.1's own tensors (benchmarks.sweep --quick and
# --in-place; docs/benchmarks.md): (channels, pairs, element size, heads, in place) -> configuration, with its time over
# a copy (cold for the query and index query, warm for the small 3-D tensors) and, in brackets, what it replaced (out
# of place: the configuration before, where the sweep's best was 1% faster or more) or the general rule's time (in
# place). Out of place: the sweep of 2026-12-04 14:41 of this kernel's code; in place: that of 2026-12-04 05:35,
# whose choices the sweep of 15:27 confirmed but for the index keys.
_SWEPT_CONFIGS = {
    (512, 32, 2, 64, False): LaunchConfig(2, 512, 64, 2),  # BF16/FP16 query: 1.070x copy (R4 w2: 1.083x)
    (512, 32, 4, 64, False): LaunchConfig(2, 512, 64, 2),  # FP32 query: 1.017x (R1 w2: 1.036x)
    (128, 32, 2, 32, False): LaunchConfig(16, 64, 64, 2),  # BF16/FP16 index query: 1.355x (best, R32 w4: 1.351x)
    (128, 32, 4, 32, False): LaunchConfig(16, 64, 64, 4),  # FP32 index query: 1.197x (best, R8 w2: 1.196x)
    # BF16/FP16 window KV: 1.121x (R16 w8: 1.169x); compressed KV, the same key: 1.208x (1.309x)
    (512, 32, 2, 1, False): LaunchConfig(4, 512, 64, 2),
    (512, 32, 4, 1, False): LaunchConfig(2, 512, 64, 2),  # FP32 window KV: 1.110x (R4 w4: 1.179x)
    # BF16/FP16 index keys: 1.558x (R8 w4, 1.524x, was 4.7% slower than R4 w2 on the backward: run 34)
    (128, 32, 2, 1, False): LaunchConfig(4, 64, 64, 2),
    (128, 32, 4, 1, False): LaunchConfig(8, 64, 64, 4),  # FP32 index keys: 1.382x (R4 w2: 1.489x)
    (512, 32, 2, 64, True): LaunchConfig(32, 512, 64, 2),  # BF16/FP16 query in place: 0.251x copy (0.260x)
    (512, 32, 4, 64, True): LaunchConfig(32, 512, 64, 4),  # FP32 query in place: 0.168x (0.170x)
    (128, 32, 2, 32, True): LaunchConfig(32, 64, 64, 2),  # BF16/FP16 index query in place: 0.899x (1.097x)
    # The 3-D window and compressed KV in place (each row its own cos/sin): one pair a thread in FP32, the fastest of
    # the in-place sweep of run 64 (an H100, cold): the window KV 0.385x (its best, R4 w4, 0.382x; R16 w8 0.387x),
    # the compressed KV, the same key, 0.530x (R16 w8: 0.543x). BF16/FP16 keep 16 rows on 8 warps (the sweep of run
    # 19; the window KV 0.567x, the compressed KV 0.712x in run 64): one pair a thread, 8 rows on 8 warps, was faster
    # cold (0.547x, 0.702x) but 4.6% slower warm on the window KV in the speed gate against this configuration (run
    # 65). The index keys take the general rule (one pair a thread, 4 rows on 4 warps): 4-5% faster warm than 2 rows
    # on 2 warps, which run 64 had chosen cold, and level or faster cold (run 73, scripts.in_place_ceiling).
    (512, 32, 2, 1, True): LaunchConfig(16, 512, 64, 8),
    (512, 32, 4, 1, True): LaunchConfig(8, 512, 64, 8),
    # FP32 in place, the sweep of 2026-12-04 19:00 (run 48), cold: the index query 0.624x (rule, R16 w2: 0.664x);
    # the 2 GB tensor 0.140x (R16 w2: 0.145x)
    (128, 32, 4, 32, True): LaunchConfig(16, 64, 64, 4),
    (512, 32, 4, 128, True): LaunchConfig(16, 512, 64, 4),
    # BF16/FP16 2 GB tensor in place, the same sweep: 0.162x (rule, R32 w2: 0.164x)
    (512, 32, 2, 128, True): LaunchConfig(128, 512, 64, 8),
}


def _launch_config(
    rows: int, channels: int, pairs: int, element_size: int, heads: int = 1, in_place: bool = False
) -> LaunchConfig:
    """Choose rows per program, chunk widths and warps for a tensor of ``rows`` x ``channels``.

    DeepSeek V4.1's own tensors take the sweep's fastest configuration (``_SWEPT_CONFIGS``). Otherwise: the copied
    part and the rotary block each in one chunk as wide as it is, rounded up to a power of two (at most 1024
    channels), as many rows as make 4 KiB of the widest chunk, on 2 warps: the sweeps' fastest programs hold a few
    KiB of whole rows, and a program then has all its loads in flight at once. In place, which copies nothing: 4 KiB
    of the rotary block on 2 warps where heads share cos/sin, and one pair a thread on 4 warps where every row
    computes its own (3-D values: a thread then waits for one cos/sin, not several in a row; the fastest for every
    3-D DeepSeek tensor in the in-place sweep of run 64). With several heads, rows per program divide the heads where
    a power of two of at least 4 does, so that a program's rows share one position's cos/sin. A program that computes
    cos/sin for more than 2 pairs a thread gets more warps, up to 8: libdevice's ``cos`` and ``sin`` (their slow
    paths for large angles included) are inlined for every pair a thread holds, and narrow rows, many to a program,
    made programs of thousands of instructions on 255 registers that cost the suite's fresh builds most of their
    time (docs/ci.md).
    """
    if _INTERPRETED:
        return _interpreter_config(rows, channels, pairs)
    swept = _SWEPT_CONFIGS.get((channels, pairs, element_size, heads, in_place))
    if swept is not None and swept.block_rows <= rows:
        return swept
    copy_channels = min(triton.next_power_of_2(max(channels - 2 * pairs, 1)), 1024)
    rotary_channels = min(triton.next_power_of_2(2 * pairs), 1024)
    if in_place and heads == 1:  # only the rotary block moves, and every row has its own cos/sin: one pair a thread
        block_rows, num_warps = max(1, 2 * 32 * 4 // rotary_channels), 4
    elif in_place:
        block_rows, num_warps = max(1, 4096 // (rotary_channels * element_size)), 2
    else:
        block_rows, num_warps = max(1, 4096 // (max(copy_channels, rotary_channels) * element_size)), 2
    block_rows = min(block_rows, triton.next_power_of_2(max(rows, 1)))
    heads_power_of_two = heads & -heads  # the largest power of two dividing heads
    if heads_power_of_two >= 4:
        block_rows = min(block_rows, heads_power_of_two)
    frequency_rows = 1 if _shares_frequencies(heads, block_rows) else block_rows
    while num_warps < 8 and frequency_rows * rotary_channels // 2 > 2 * 32 * num_warps:
        num_warps *= 2
    return LaunchConfig(block_rows, copy_channels, rotary_channels, num_warps)


def _shares_frequencies(heads: int, block_rows: int) -> bool:
    """Whether a program's rows are heads of one position, and so share its cos/sin: rows per program divide the
    heads (the kernel's SHARED_FREQUENCIES)."""
    return heads % block_rows == 0


def _interpreter_config(rows: int, channels: int, pairs: int) -> LaunchConfig:
    """Under the interpreter every program and chunk costs Python time, so programs are as large as a tile allows:
    the copied part in one chunk (a whole chunk where it is a power of two, else a masked one), the rotary block in
    one, and as many rows as fit (the CPU suite runs the shared-frequency path through explicit configurations)."""
    copy_channels = min(triton.next_power_of_2(max(channels - 2 * pairs, 1)), 1024)
    rotary_channels = min(triton.next_power_of_2(2 * pairs), 1024)
    block_rows = min(_ELEMENTS_PER_PROGRAM // max(copy_channels, rotary_channels), triton.next_power_of_2(rows))
    return LaunchConfig(max(block_rows, 1), copy_channels, rotary_channels, num_warps=4)


@dataclasses.dataclass
class _Plan:
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
        compiled = _rope_kernel[self.grid](values, frequencies, output, **self.scalars, num_warps=self.num_warps)
        # The compiled kernel takes every parameter positionally, in the kernel's order (constexprs included).
        if not _INTERPRETED and hasattr(compiled, "__getitem__") and list(self.scalars) == _KERNEL_SCALARS:
            self.compiled = compiled


# The kernel's parameters after its three pointers, in order.
_KERNEL_SCALARS = list(getattr(_rope_kernel, "arg_names", ())[3:]) if HAVE_TRITON else []
_PLANS: dict[tuple, _Plan] = {}
_MAX_PLANS = 4096


def _strides_as_indexed(tensor: torch.Tensor, dims: int) -> tuple[int, ...]:
    """The strides of ``tensor``'s first ``dims`` dimensions as the kernel indexes them: 0 for a size-1 dimension,
    whose index is always 0. Its stride addresses nothing, and passing it would give layouts that differ only there
    (a one-token step sliced from a longer buffer, say) compiled kernels of their own: Triton specializes integer
    arguments on their value (1, or divisible by 16)."""
    return tuple(
        stride if size > 1 else 0 for size, stride in zip(tensor.shape[:dims], tensor.stride()[:dims], strict=True)
    )


def _frequency_strides(frequencies: torch.Tensor) -> tuple[int, int, int]:
    """Batch, sequence and pair strides of ``[b, s, pairs(, 2)]`` frequencies; 0 where they broadcast (size 1)."""
    return _strides_as_indexed(frequencies, 3)


def _launch_kernel(
    values: torch.Tensor,
    frequencies: torch.Tensor,
    output: torch.Tensor,
    *,
    negate_sin: bool,
    settings: KernelSettings,
    config: LaunchConfig | None = None,
) -> None:
    """One launch of :func:`_rope_kernel` writing ``output`` (a new tensor, or ``values`` itself in place).

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``, any strides.
        frequencies: float32 angles ``[batch or 1, sequence or 1, pairs]`` (``settings.in_kernel_frequencies``), or
            torch.polar's pairs ``[batch or 1, sequence or 1, pairs, 2]`` with cos and sin adjacent.
        output: shaped like ``values``; ``values`` itself rotates in place and copies nothing.
        negate_sin: rotate by the conjugate.
        settings: the contraction variant and frequency source (``settings.contraction`` must not be None).
        config: tile shape and warps; default :func:`_launch_config`.
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
    plan = _PLANS.get(key)
    if plan is None:
        plan = _make_plan(values, frequencies, output, negate_sin, settings, config)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    if values.is_cuda and values.device.index != torch.cuda.current_device():
        with torch.cuda.device(values.device):  # Triton launches on the current device's stream
            plan.launch(values, frequencies, output)
    else:
        plan.launch(values, frequencies, output)


def _make_plan(
    values: torch.Tensor,
    frequencies: torch.Tensor,
    output: torch.Tensor,
    negate_sin: bool,
    settings: KernelSettings,
    config: LaunchConfig | None,
) -> _Plan:
    four_d = values.dim() == 4
    batch, sequence = values.shape[0], values.shape[1]
    heads = values.shape[2] if four_d else 1
    channels, pairs = values.shape[-1], frequencies.shape[2]
    rows = batch * sequence * heads
    if rows > _MAX_ROWS:  # _uses_fused_kernel sends such tensors to the eager path; this guards direct callers
        raise ValueError(f"the kernel indexes rows in 32 bits: {rows} rows (values {_describe(values)}) is too many")
    config = config or _launch_config(rows, channels, pairs, values.element_size(), heads, in_place=output is values)
    programs_per_batch = triton.cdiv(sequence * heads, config.block_rows)

    def strides(tensor: torch.Tensor) -> tuple[int, int, int, int]:
        batch, sequence, *head = _strides_as_indexed(tensor, 3 if four_d else 2)
        return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)

    frequency_batch, frequency_sequence, frequency_pair = _frequency_strides(frequencies)
    names = ("stride_values_batch", "stride_values_sequence", "stride_values_head", "stride_values_channel")
    output_names = ("stride_output_batch", "stride_output_sequence", "stride_output_head", "stride_output_channel")
    scalars = {
        "programs_per_batch": programs_per_batch,
        **dict(zip(("batch_magic", "batch_shift"), _division_magic(programs_per_batch), strict=True)),
        "sequence": sequence,
        "heads": heads,
        "pairs": pairs,
        "pair_offset": channels - 2 * pairs,
        "sin_sign": _FLOAT32_SIGN_BIT if negate_sin else 0,
        **dict(zip(names, strides(values), strict=True)),
        **dict(zip(output_names, strides(output), strict=True)),
        "stride_frequencies_batch": frequency_batch,
        "stride_frequencies_sequence": frequency_sequence,
        "stride_frequencies_pair": frequency_pair,
        "COPY_CHANNELS": output is not values,
        "IN_KERNEL_FREQUENCIES": settings.in_kernel_frequencies,
        "SHARED_FREQUENCIES": _shares_frequencies(heads, config.block_rows),
        "REAL": settings.contraction[0],
        "IMAG": settings.contraction[1],
        "BLOCK_R": config.block_rows,
        "COPY_K": config.copy_channels,
        "ROTARY_K": config.rotary_channels,
    }
    grid = (batch * programs_per_batch, 1, 1)
    return _Plan(grid=grid, scalars=scalars, num_warps=config.num_warps)


def _division_magic(divisor: int) -> tuple[int, int]:
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


def _angles_3d(angles: torch.Tensor) -> torch.Tensor:
    """``[pairs]`` and ``[sequence, pairs]`` angles (3-D values only) as ``[1, 1 or sequence, pairs]`` views."""
    return angles if angles.dim() == 3 else angles.reshape((1,) * (3 - angles.dim()) + tuple(angles.shape))


def _launch(
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
        config: tile shape and warps; default :func:`_launch_config`.

    Returns:
        A new contiguous tensor shaped and typed like ``values``, or ``values`` when ``in_place``. Where the
        device's eager multiply matches no contraction variant (or is not calibrated yet inside a CUDA-graph
        capture), the eager path's result, with its bits.
    """
    settings = _kernel_settings(values.device)
    if settings.contraction is None:
        if in_place:
            _rotate_in_place_eagerly(values, angles, negate_sin)
            return values
        return _apply_rope_torch(values, angles, negate_sin)
    output = values if in_place else torch.empty(values.shape, dtype=values.dtype, device=values.device)
    if values.numel() == 0:
        return output
    angles = _angles_3d(angles)
    if settings.in_kernel_frequencies:
        frequencies = angles
    else:
        frequencies = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    _launch_kernel(values, frequencies, output, negate_sin=negate_sin, settings=settings, config=config)
    return output


# -- calibration -------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Calibration:
    """What :func:`calibrate` established for one device.

    Attributes:
        device: the device, e.g. ``cuda:0``.
        contraction: the variant ``(real, imag)`` whose bits equal the device's eager multiply on every probe
            segment, or None when no single variant does (the eager path then runs on this device).
        in_kernel_frequencies: the kernel's cos/sin equal ``torch.polar``'s on every sampled angle.
        observed: what the probes saw: per segment and part, the variants that matched; the frequency mismatches.
    """

    device: str
    contraction: tuple[str, str] | None
    in_kernel_frequencies: bool
    observed: str


_CALIBRATIONS: dict[torch.device, Calibration] = {}
_WARNED: set[torch.device] = set()


def _crafted_floats(count: int, seed: int) -> list[float]:
    """``count`` floats in [1, 2) with 23 pseudo-random fraction bits (an LCG: the same on every machine)."""
    state, floats = seed, []
    for _ in range(count):
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        floats.append(1.0 + (state >> 41) / 2**23)
    return floats


def _crafted_values(factors: torch.Tensor) -> torch.Tensor:
    """complex64 values whose products with ``factors`` nearly cancel, the real part at even and the imaginary part
    at odd positions. In a near-cancellation the three contraction variants round to three different results
    (fma of the first product: ``P - RN(Q)``; of the second: ``RN(P) - Q``; none: ``RN(P) - RN(Q)``, all exact),
    so a few elements tell every pair of variants apart."""
    flat = factors.resolve_conj().reshape(-1).to(torch.complex128)
    cos, sin = flat.real, flat.imag
    first = torch.tensor(_crafted_floats(flat.numel(), seed=flat.numel()), dtype=torch.float64)
    even = torch.arange(flat.numel()) % 2 == 0
    # x0 * cos ~ x1 * sin cancels the real part; x0 * sin ~ -x1 * cos the imaginary part.
    second = torch.where(even, first * cos / sin, -first * sin / cos)
    return torch.complex(first.float(), second.float()).reshape(factors.shape)


def contraction_probe(device: torch.device | str) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """The calibration's operands: ``(segment, values, factors)``, complex64 on ``device``, whose eager product
    covers each way PyTorch's elementwise kernels can run it: a vectorized body, a body with a tail, a tensor
    shorter than a vector, a factor broadcast over heads (the RoPE multiply), and a conjugated factor (inverse and
    backward)."""
    cos = torch.tensor(_crafted_floats(4101, seed=1), dtype=torch.float32) - 1.5
    sin = torch.tensor(_crafted_floats(4101, seed=2), dtype=torch.float32) - 0.5
    factors = torch.complex(torch.where(cos.abs() < 1e-3, 0.25, cos), torch.where(sin.abs() < 1e-3, 0.75, sin))
    heads_factors = factors[: 32 * 32].reshape(32, 1, 32)
    segments = [
        ("vector-body", factors[:4096]),
        ("body-and-tail", factors[:4101]),
        ("short", factors[:3]),
        ("broadcast-over-heads", heads_factors),
        ("conjugate", factors[:4096].conj()),
    ]
    probe = []
    for name, segment_factors in segments:
        operand_shape = (32, 4, 32) if name == "broadcast-over-heads" else segment_factors.shape
        values = _crafted_values(segment_factors.expand(operand_shape))
        probe.append((name, values.to(device), segment_factors.to(device)))
    return probe


def _eager_multiply(values: torch.Tensor, factors: torch.Tensor) -> torch.Tensor:
    return values * factors


def _variant_products(
    probe: list[tuple[str, torch.Tensor, torch.Tensor]], contraction: tuple[str, str]
) -> torch.Tensor:
    """The kernel's products of every probe segment, concatenated, as float32 ``[elements, 2]``."""
    values = torch.cat([v.reshape(-1) for _, v, _ in probe])
    factors = torch.cat([f.expand(v.shape).resolve_conj().reshape(-1) for _, v, f in probe])
    values = torch.view_as_real(values)[None]  # [1, N, 2]: one pair per row
    table = torch.view_as_real(factors)[None, :, None, :]  # [1, N, 1, 2]
    output = torch.empty_like(values)
    settings = KernelSettings(contraction, in_kernel_frequencies=False, source="probe")
    config = LaunchConfig(block_rows=1024, copy_channels=2, rotary_channels=2, num_warps=4)
    _launch_kernel(values, table, output, negate_sin=False, settings=settings, config=config)
    return output[0]


def _matching_contraction(
    probe: list[tuple[str, torch.Tensor, torch.Tensor]], multiply
) -> tuple[tuple[str, str] | None, str]:
    """The variant whose bits equal ``multiply``'s on every segment, and what each segment matched."""
    eager = torch.view_as_real(torch.cat([multiply(v, f).reshape(-1) for _, v, f in probe]))
    eager_bits = eager.contiguous().view(torch.int32)
    variants = {name: _variant_products(probe, (name, name)).view(torch.int32) for name in CONTRACTIONS}
    chosen, seen = [], []
    for part, label in enumerate(("real", "imag")):
        uniform, start = set(CONTRACTIONS), 0
        per_segment = []
        for segment, values, _ in probe:
            end = start + values.numel()
            matched = {
                name: bool(torch.equal(bits[start:end, part], eager_bits[start:end, part]))
                for name, bits in variants.items()
            }
            names = [name for name in CONTRACTIONS if matched[name]]
            per_segment.append(f"{segment}={'|'.join(names) or 'none of them'}")
            uniform &= set(names)
            start = end
        seen.append(f"{label}: " + " ".join(per_segment))
        chosen.append(next(iter(uniform)) if len(uniform) == 1 else None)
    contraction = (chosen[0], chosen[1]) if None not in chosen else None
    return contraction, "; ".join(seen)


def frequency_probe_angles(device: torch.device | str) -> torch.Tensor:
    """float32 angles the calibration checks the kernel's cos/sin on: the specials, every sign/exponent/leading
    mantissa bits pattern (subnormals, huge and non-finite angles included) with pseudo-random low bits, and RoPE
    angles of positions up to 2**20."""
    high = torch.arange(2**16, dtype=torch.int64) << 16
    low = torch.tensor([int(f * 2**23) & 0xFFFF for f in _crafted_floats(2**16, seed=3)], dtype=torch.int64)
    patterns = (high | low).to(torch.int32).view(torch.float32)
    specials = torch.tensor(
        [0x0, 0x80000000, 0x1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000],
        dtype=torch.int64,
    )
    positions = torch.arange(0, 2**20, 61, dtype=torch.float32)
    inverse_frequencies = 10000.0 ** (-torch.arange(32, dtype=torch.float32) / 32)
    rope = (positions[:, None] * inverse_frequencies).reshape(-1)
    return torch.cat([specials.to(torch.int32).view(torch.float32), patterns, rope]).to(device)


def kernel_frequencies(angles: torch.Tensor) -> torch.Tensor:
    """The (cos, sin) pairs ``[..., 2]`` the kernel computes in place of ``torch.polar(ones, angles)``."""
    flat = angles.contiguous().reshape(-1)
    output = torch.empty((flat.numel(), 2), dtype=torch.float32, device=angles.device)
    if flat.numel():
        _frequencies_kernel[(triton.cdiv(flat.numel(), 1024),)](flat, output, flat.numel(), BLOCK=1024)
    return output.reshape(*angles.shape, 2)


def _libdevice_matches_polar(device: torch.device) -> tuple[bool, str]:
    angles = frequency_probe_angles(device)
    polar = torch.view_as_real(torch.polar(torch.ones_like(angles), angles))
    differ = (kernel_frequencies(angles).view(torch.int32) != polar.view(torch.int32)).any(-1)
    count = int(differ.sum())
    if not count:
        return True, f"kernel cos/sin == torch.polar on {angles.numel()} sampled angles"
    first = angles[differ][:3].view(torch.int32).tolist()
    examples = ", ".join(f"0x{bits & 0xFFFFFFFF:08X}" for bits in first)
    return False, f"kernel cos/sin differ from torch.polar on {count} of {angles.numel()} angles (e.g. {examples})"


def calibrate(device: torch.device | str | None = None, *, multiply=None) -> Calibration:
    """Measure how ``device``'s eager path computes RoPE, so that the kernel reproduces it bit for bit.

    Runs the device's eager complex multiply on crafted operands (:func:`contraction_probe`) and the kernel's three
    contraction variants on the same ones, and keeps the variant that matches in every segment; checks the kernel's
    cos/sin against ``torch.polar`` on sampled angles (CUDA only: the interpreter keeps torch.polar's table). The
    answer is cached per device; :func:`apply_rope_triton` calls this on its first eager call on a device. Call it
    yourself before capturing CUDA graphs or compiling with torch.compile, where it cannot run.

    Args:
        device: the device; default the current CUDA device (the CPU under the interpreter).
        multiply: the eager complex multiply to reproduce, ``(values, factors) -> product``; default torch's own.
            Passing one (tests pass fakes of known contraction) returns its calibration without caching it.

    Returns:
        The :class:`Calibration`.

    Raises:
        RuntimeError: inside torch.compile tracing or CUDA-graph capture, or without Triton.
    """
    if not HAVE_TRITON:
        raise RuntimeError("calibrate() needs triton")
    if device is None:
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    if torch.compiler.is_compiling() or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        raise RuntimeError(
            "calibrate() runs the eager path and reads its bits back, which torch.compile tracing and CUDA-graph "
            f"capture do not allow: call impl.rope_triton.calibrate({str(device)!r}) before them"
        )
    with torch.cuda.device(device) if device.type == "cuda" else _no_context():
        contraction, seen = _matching_contraction(contraction_probe(device), multiply or _eager_multiply)
        if device.type == "cuda" and not _INTERPRETED:
            in_kernel, frequencies_seen = _libdevice_matches_polar(device)
        else:
            in_kernel, frequencies_seen = False, "interpreter: torch.polar's table (its cos/sin are numpy's)"
    calibration = Calibration(str(device), contraction, in_kernel, f"{seen}; {frequencies_seen}")
    if multiply is None:
        _CALIBRATIONS[device] = calibration
    return calibration


class _no_context:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _forced(variable: str, allowed: dict[str, object] | None = None) -> object:
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    if allowed is not None:
        if text not in allowed:
            raise ValueError(f"{variable}={text!r}: expected one of {', '.join(allowed)}")
        return allowed[text]
    parts = tuple(text.split("/"))
    if len(parts) != 2 or any(part not in CONTRACTIONS for part in parts):
        raise ValueError(f"{variable}={text!r}: expected <real>/<imag>, each one of {', '.join(CONTRACTIONS)}")
    return parts


def settings(device: torch.device | str) -> KernelSettings:
    """The contraction variant and frequency source the kernel uses on ``device`` now (calibrating a CUDA device on
    first use; a forcing environment variable wins)."""
    return _kernel_settings(torch.device(device))


def _kernel_settings(device: torch.device) -> KernelSettings:
    contraction = _forced(CONTRACTION_VARIABLE)
    in_kernel = _forced(FREQUENCIES_VARIABLE, _FREQUENCY_SOURCES)
    forced = contraction is not None or in_kernel is not None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    calibration = _CALIBRATIONS.get(device)
    if calibration is None and device.type == "cuda" and not _INTERPRETED:
        if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
            if contraction is None:
                _warn_once(
                    device,
                    f"{device} is not calibrated yet, which cannot happen inside torch.compile tracing or a CUDA-graph "
                    f"capture: the eager path runs; call impl.rope_triton.calibrate({str(device)!r}) before them",
                )
            return KernelSettings(contraction, bool(in_kernel), "forced" if forced else "not calibrated: eager path")
        calibration = calibrate(device)
    if calibration is None:  # the interpreter: no eager path of a GPU to measure
        source = "forced" if forced else "interpreter default: the H200's variant"
        return KernelSettings(contraction or MEASURED_CONTRACTION, bool(in_kernel), source)
    if calibration.contraction is None and contraction is None:
        _warn_once(
            device,
            f"the eager complex multiply of {device} matches no single contraction variant, so the eager path runs "
            f"there. The probe saw: {calibration.observed}",
        )
    return KernelSettings(
        contraction or calibration.contraction,
        calibration.in_kernel_frequencies if in_kernel is None else in_kernel,
        "forced" if forced else "calibrated",
    )


def _warn_once(device: torch.device, message: str) -> None:
    if device not in _WARNED:
        _WARNED.add(device)
        warnings.warn(f"dsv41 rope: {message}", RuntimeWarning, stacklevel=3)


# -- operators and autograd --------------------------------------------------------------------------------------------

if HAVE_TRITON:
    # The launches as PyTorch operators: torch.compile treats each as one opaque node (no graph break, no tracing into
    # Triton's launcher); the fake implementation gives the output's metadata without running the kernel, and the
    # in-place one declares the tensor it mutates.
    @torch.library.custom_op(f"{_OPERATOR_NAMESPACE}::rotate", mutates_args=())
    def _rotate_op(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return _launch(values, angles, negate_sin)

    @_rotate_op.register_fake
    def _rotate_op_fake(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
        return torch.empty(values.shape, dtype=values.dtype, device=values.device)

    @torch.library.custom_op(f"{_OPERATOR_NAMESPACE}::rotate_", mutates_args=("values",))
    def _rotate_in_place_op(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> None:
        _rotate_in_place(values, angles, negate_sin)

    @_rotate_in_place_op.register_fake
    def _rotate_in_place_op_fake(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> None:
        return None


def _rotate(values: torch.Tensor, angles: torch.Tensor, negate_sin: bool) -> torch.Tensor:
    """The out-of-place launch; through its operator only while torch.compile traces (eagerly, the operator's
    dispatch would only add host time)."""
    if torch.compiler.is_compiling():
        return _rotate_op(values, angles, negate_sin)
    return _launch(values, angles, negate_sin)


class _FusedRope(torch.autograd.Function):
    """Autograd wrapper: the backward is the same one-pass rotation by the conjugate, itself differentiable. It saves
    the angles alone (cos/sin are recomputed, in the kernel or by torch.polar)."""

    @staticmethod
    def forward(ctx: object, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> torch.Tensor:
        """Rotate ``values`` by ``angles`` (conjugated when ``inverse``); see :func:`_launch`."""
        ctx.save_for_backward(angles)
        ctx.inverse = inverse
        return _rotate(values, angles, inverse)

    @staticmethod
    def backward(ctx: object, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        """The rotation is orthogonal, so its gradient is the rotation by the conjugate."""
        (angles,) = ctx.saved_tensors
        if not ctx.needs_input_grad[0]:
            return None, None, None
        # Through apply (not _launch) so that the backward is recorded under create_graph and can be
        # differentiated again: it is linear in grad_output, and its own gradient is the forward rotation.
        return _FusedRope.apply(grad_output, angles, not ctx.inverse), None, None


# -- the eager path ----------------------------------------------------------------------------------------------------


def _apply_rope_torch(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """The eager reference: Automodel's ``_apply_rope`` (``deepseek_v41/attention.py``), step for step.

    Every step is kept, ``.contiguous()`` included: which CUDA kernel PyTorch runs for the complex multiply (and for
    its backward) depends on its operands' layout, so for FP32 values, where ``.float()`` is a no-op, skipping the
    copy would hand the multiply a strided view and could change the path the bits come from. One step is added:
    a rotary block at an odd storage offset, which Automodel's code cannot view as complex, is copied first.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``.
        angles: ``[batch or 1, sequence, pairs]``, broadcastable against the rotary block's pairs.
        inverse: rotate by the conjugate.

    Returns:
        A new contiguous tensor: ``values`` with its last ``2 * pairs`` channels rotated.
    """
    rotary_dim = angles.shape[-1] * 2
    pairs = values[..., -rotary_dim:].float().unflatten(-1, (-1, 2)).contiguous()
    if pairs.storage_offset() % 2:
        # FP32 rows of an odd channel count under leading size-1 dimensions: the block is contiguous, so nothing
        # was copied, but it starts mid-complex-element, where view_as_complex refuses (Automodel's code raises).
        pairs = pairs.clone(memory_format=torch.contiguous_format)
    complex_pairs = torch.view_as_complex(pairs)
    frequencies = torch.polar(torch.ones_like(angles), angles)
    if values.dim() == 4:
        frequencies = frequencies.unsqueeze(2)
    if inverse:
        frequencies = frequencies.conj()
    rotated = torch.view_as_real(complex_pairs * frequencies).flatten(-2).to(values.dtype)
    output = values.clone(memory_format=torch.contiguous_format)
    output[..., -rotary_dim:] = rotated
    return output


def _rotate_in_place_eagerly(values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> None:
    """The in-place fallback: the eager path's rotated channels, written into ``values``' rotary block."""
    rotary = values[..., -2 * angles.shape[-1] :]
    rotary.copy_(_apply_rope_torch(rotary, angles, inverse))


# -- input checks and dispatch -----------------------------------------------------------------------------------------


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


def _check_in_place(values: torch.Tensor, angles: torch.Tensor) -> None:
    """Refuse what PyTorch's own in-place operations refuse, before anything is written."""
    if values.requires_grad and torch.is_grad_enabled():
        raise RuntimeError(
            f"apply_rope_triton_ rotates in place without recording a gradient, but values {_describe(values)} "
            "require grad: call apply_rope_triton (out of place) for training, or this under torch.no_grad()"
        )
    if any(size > 1 and stride == 0 for size, stride in zip(values.shape, values.stride(), strict=True)):
        raise RuntimeError(
            f"unsupported operation: more than one element of values {_describe(values)} (strides "
            f"{values.stride()}) refers to a single memory location; clone() it before rotating in place"
        )


def _check_no_shared_memory(values: torch.Tensor, angles: torch.Tensor) -> None:
    """Refuse angles that live in the memory the in-place rotation writes (checked where data pointers exist:
    eagerly, or when the compiled operator runs)."""
    if values.numel() == 0 or angles.numel() == 0:
        return
    if values.untyped_storage().data_ptr() != angles.untyped_storage().data_ptr():
        return

    def extent(t: torch.Tensor) -> tuple[int, int]:
        last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True))
        return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()

    (values_start, values_end), (angles_start, angles_end) = extent(values), extent(angles)
    if values_start < angles_end and angles_start < values_end:
        raise RuntimeError(
            f"angles {_describe(angles)} share memory with values {_describe(values)}, which the in-place rotation "
            "would overwrite while reading them; clone() the angles"
        )


def _uses_fused_kernel(values: torch.Tensor, angles: torch.Tensor) -> bool:
    """Whether :func:`apply_rope_triton` runs the kernel for these (valid) inputs rather than the eager path (a CUDA
    device whose calibration found no contraction variant runs the eager path too, inside the launch)."""
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


# -- public entry points -----------------------------------------------------------------------------------------------


def apply_rope_triton(values: torch.Tensor, angles: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotary embedding of the last ``2 * angles.shape[-1]`` channels, bit-identical to the eager path.

    Args:
        values: ``[batch, sequence, channels]`` or ``[batch, sequence, heads, channels]``; any strides.
        angles: ``[batch or 1, sequence or 1, pairs]`` (for 3-D values also ``[sequence, pairs]`` or ``[pairs]``);
            any strides.
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
    if values.requires_grad and torch.is_grad_enabled():
        return _FusedRope.apply(values, angles, inverse)
    return _rotate(values, angles, inverse)  # no gradient wanted: no autograd machinery


def apply_rope_triton_(values: torch.Tensor, angles: torch.Tensor, *, inverse: bool = False) -> torch.Tensor:
    """In-place rotary embedding: rotates ``values[..., -2 * pairs:]`` and returns ``values``, bit for bit as
    :func:`apply_rope_triton` and the eager path give the rotated channels. The other channels are neither read nor
    written. For callers that own the tensor and need no gradient (inference, an indexer under ``no_grad``).

    Args:
        values: as for :func:`apply_rope_triton`; written through its own strides (views of longer buffers and the
            transposed attention output included). Must not need a gradient, nor overlap itself in memory.
        angles: as for :func:`apply_rope_triton`; must not share memory with ``values``.
        inverse: rotate by ``exp(-i * angles)``.

    Returns:
        ``values``, its version counter bumped.

    Raises:
        TypeError, ValueError: as :func:`apply_rope_triton`.
        RuntimeError: ``values`` requires grad while grad mode is on, overlaps itself, or shares memory with
            ``angles``. Nothing is written then.
    """
    _check_inputs(values, angles, inverse)
    _check_in_place(values, angles)
    if torch.compiler.is_compiling() and HAVE_TRITON:
        _rotate_in_place_op(values, angles, inverse)
    else:
        _rotate_in_place(values, angles, inverse)
    return values


def _rotate_in_place(values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> None:
    """The in-place rotation, eagerly or as the compiled operator's body: fused, or the eager fallback."""
    _check_no_shared_memory(values, angles)
    if not _uses_fused_kernel(values, angles):
        _rotate_in_place_eagerly(values, angles, inverse)
        return
    _launch(values, angles, inverse, in_place=True)
    torch.autograd.graph.increment_version(values)  # a kernel's writes are invisible to autograd otherwise
