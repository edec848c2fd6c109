"""The Triton kernel: one launch rotates the last ``2 * pairs`` channels of every row and, out of place, copies the
others.

A row is one ``(batch, position, head)`` of ``values [batch, sequence, heads, channels]`` (3-D values have one head).
Each pair ``(x0, x1)`` of the rotary block becomes ``(x0 + i x1) * (cos + i sin)`` in float32, rounded once to the
storage dtype (:mod:`.float_ops` holds that arithmetic); ``sin`` is negated for the conjugate (``inverse``, and every
backward). Copied channels are moved with plain loads and stores, so every bit, NaN payloads included, is kept.
"""

from __future__ import annotations

from .runtime import HAVE_TRITON, tl, triton

__all__ = ["frequencies_kernel", "rope_kernel"]

if HAVE_TRITON:
    from .float_ops import complex_multiply, cos_sin, divide, flip_sign, from_float32, to_float32

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
        x = to_float32(tl.load(source + channel[None, :] * stride_source, mask=mask, other=0.0))
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
            cos, sin = cos_sin(cos_or_angle)
        else:
            cos, sin = cos_or_angle, sin_or_angle
        sin = flip_sign(sin, sin_sign)
        cos = tl.broadcast_to(cos, (BLOCK_R, ROTARY_K // 2))
        sin = tl.broadcast_to(sin, (BLOCK_R, ROTARY_K // 2))
        real, imag = complex_multiply(x0, x1, cos, sin, REAL, IMAG)
        rotated = from_float32(tl.reshape(tl.join(real, imag), (BLOCK_R, ROTARY_K)), target.dtype.element_ty)
        channel = start + tl.arange(0, ROTARY_K)
        mask = row_ok & (channel < 2 * pairs)[None, :]
        if IN_PLACE:
            tl.debug_barrier()
        tl.store(target + channel[None, :] * stride_target, rotated, mask=mask)

    # Triton would specialize the magic number and shift on their values (1, multiples of 16) and so build more kernels
    # for the same shapes.
    @triton.jit(do_not_specialize=["batch_magic", "batch_shift"])
    def rope_kernel(
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
        batch = divide(program, batch_magic, batch_shift)
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
    def frequencies_kernel(angles_ptr, output_ptr, count, BLOCK: tl.constexpr):
        """The kernel's own (cos, sin) of ``count`` float32 angles, as ``[count, 2]`` pairs (calibration and tests)."""
        index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = index < count
        cos, sin = cos_sin(tl.load(angles_ptr + index, mask=mask, other=0.0))
        pair_offsets = index[:, None] * 2 + tl.arange(0, 2)[None, :]
        tl.store(output_ptr + pair_offsets, tl.join(cos, sin), mask=mask[:, None])
