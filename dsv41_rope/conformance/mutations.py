"""The mutations of the gating-power test (``test_gating_power.py``): small plausible mistakes in the kernel, each an
edit of one line of one kernel module (``TARGETS``) that must match exactly once, so that a kernel change that retires
a mutation fails the test instead of silently passing."""

from __future__ import annotations

__all__ = ["BACKEND_ONLY", "CAUGHT_BY_CALIBRATION", "LAYOUT_MUTATIONS", "MUTATIONS", "TARGETS"]

# name: (original text, mutated text)
MUTATIONS = {
    # The contraction of the complex multiply: the default variant (first/first), and the others.
    "real-part-fuses-second-product": (
        "real = fma(x0, cos, negate(rounded_product(x1, sin)))",
        "real = fma(negate(x1), sin, rounded_product(x0, cos))",
    ),
    "imaginary-part-fuses-second-product": (
        "imag = fma(x0, sin, rounded_product(x1, cos))",
        "imag = fma(x1, cos, rounded_product(x0, sin))",
    ),
    "real-part-unfused": (
        "real = fma(x0, cos, negate(rounded_product(x1, sin)))",
        "real = rounded_product(x0, cos) - rounded_product(x1, sin)",
    ),
    "imaginary-part-unfused": (
        "imag = fma(x0, sin, rounded_product(x1, cos))",
        "imag = rounded_product(x0, sin) + rounded_product(x1, cos)",
    ),
    "second-variant-computes-first": (
        "real = fma(negate(x1), sin, rounded_product(x0, cos))",
        "real = fma(x0, cos, negate(rounded_product(x1, sin)))",
    ),
    "none-variant-left-to-fp-fusion": (
        "imag = rounded_product(x0, sin) + rounded_product(x1, cos)",
        "imag = x0 * sin + x1 * cos",
    ),
    "rounded-product-left-to-fp-fusion": (
        '"mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1',
        '"mul.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1',
    ),
    # Rounding, widening, NaNs and signs.
    "bf16-truncating-cast": ("rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16", "rounded = bits >> 16"),
    # An exact tie rounded away from zero instead of to even: only an exact BF16 tie shows it.
    "bf16-tie-rounds-half-up": (
        "rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16",
        "rounded = (bits + 0x8000) >> 16",
    ),
    "native-narrowing-truncates": (
        "            return r.to(dtype)\n",
        '            return r.to(dtype, fp_downcast_rounding="rtz")\n',
    ),
    "bf16-widening-by-cast": (
        "return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)",
        "return x.to(tl.float32)",
    ),
    "nan-not-canonical": (
        "return tl.where(is_nan, 0x7FFFFFFF, bits).to(tl.uint32).to(tl.float32, bitcast=True)",
        "return r",
    ),
    "negation-as-subtraction": (
        "return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)",
        "return 0.0 - x",
    ),
    # Addressing.
    "rotary-block-one-pair-early": ('"pair_offset": channels - 2 * pairs,', '"pair_offset": channels - 2 * pairs - 2,'),
    "head-read-with-sequence-stride": (
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_head",
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_sequence",
    ),
    "output-written-with-values-strides": (
        "batch, position, head, stride_output_batch, stride_output_sequence, stride_output_head",
        "batch, position, head, stride_values_batch, stride_values_sequence, stride_values_head",
    ),
    "frequencies-shared-by-the-batch": (
        "batch, frequency_position, frequency_position, stride_frequencies_batch, stride_frequencies_sequence, 0",
        "batch, frequency_position, frequency_position, 0, stride_frequencies_sequence, 0",
    ),
    # A program's rows: BLOCK_R rows of one batch element, heads of one position where BLOCK_R divides heads.
    "frequencies-shared-across-positions": (
        "            frequency_position = position\n",
        "            frequency_position = first_row // heads + tl.zeros((1,), dtype=tl.int32)\n",
    ),
    "shared-frequencies-of-a-row-counted-across-the-batch": (
        "frequency_position = first_row // heads + tl.zeros((1,), dtype=tl.int32)",
        "frequency_position = tl.program_id(0) * BLOCK_R // heads + tl.zeros((1,), dtype=tl.int32)",
    ),
    "first-row-counted-across-the-batch": (
        "first_row = (program - batch * programs_per_batch) * BLOCK_R",
        "first_row = program * BLOCK_R",
    ),
    # The batch element: the program id divided by a multiply-high with the launcher's magic number.
    "batch-magic-number-rounded-down": (
        "magic = -(-(1 << (32 + shift)) // divisor) - (1 << 32)",
        "magic = (1 << (32 + shift)) // divisor - (1 << 32)",
    ),
    "batch-quotient-without-the-dividend": (
        "total = tl.umulhi(dividend, magic) + dividend",
        "total = tl.umulhi(dividend, magic)",
    ),
    "frequency-pair-stride-ignored": (
        "frequency = frequency_row + pair[None, :] * stride_frequency",
        "frequency = frequency_row + pair[None, :]",
    ),
    "pair-parts-swapped": (
        "x0, x1 = tl.split(tl.reshape(x, (BLOCK_R, ROTARY_K // 2, 2)))",
        "x1, x0 = tl.split(tl.reshape(x, (BLOCK_R, ROTARY_K // 2, 2)))",
    ),
    # Chunks: a row's copied channels as whole chunks and a remainder, its rotary block in one or more chunks.
    "copy-last-whole-chunk-skipped": (
        "for chunk in range(0, whole_chunks):",
        "for chunk in range(0, whole_chunks - 1):",
    ),
    "copy-remainder-skipped": ("if whole_chunks * BLOCK_K < count:", "if False:"),
    "rotary-chunks-after-the-first-skipped": (
        "for chunk in range(1, tl.cdiv(2 * pairs, ROTARY_K)):",
        "for chunk in range(1, 1):",
    ),
    # The first rotary chunk is loaded before the copy, apart from the loop over the others.
    "first-rotary-chunk-loaded-from-the-second": (
        "            rotary_source,\n            frequency_row,\n            0,\n",
        "            rotary_source,\n            frequency_row,\n            ROTARY_K,\n",
    ),
    # Frequencies computed in the kernel (CUDA: libdevice flushes subnormal angles).
    "subnormal-sin-flushed": (
        "return libdevice.cos(angle), tl.where(subnormal, angle, libdevice.sin(angle))",
        "return libdevice.cos(angle), libdevice.sin(angle)",
    ),
    # Directions.
    "inverse-ignored": ("        sin = flip_sign(sin, sin_sign)\n", "        sin = flip_sign(sin, 0)\n"),
    "conjugate-not-passed-to-the-kernel": (
        '"sin_sign": FLOAT32_SIGN_BIT if negate_sin else 0,',
        '"sin_sign": 0,',
    ),
    "sign-flip-as-or": (
        "return (x.to(tl.int32, bitcast=True) ^ sign_bit).to(tl.float32, bitcast=True)",
        "return (x.to(tl.int32, bitcast=True) | sign_bit).to(tl.float32, bitcast=True)",
    ),
    "backward-without-conjugate": (
        "return FusedRope.apply(grad_output, angles, not ctx.inverse), None, None",
        "return FusedRope.apply(grad_output, angles, ctx.inverse), None, None",
    ),
    # The eager fallback (float64 angles, angles that need a gradient, a device with no calibrated variant), in each
    # direction: the conjugate lost, the direction dropped or flipped on the way to it.
    "eager-fallback-conjugate-lost": (
        "        frequencies = frequencies.conj()\n",
        "        frequencies = frequencies\n",
    ),
    "eager-fallback-ignores-inverse": (
        "return apply_rope_eager(values, angles, inverse=inverse)",
        "return apply_rope_eager(values, angles)",
    ),
    "eager-fallback-rotates-forward-by-the-conjugate": (
        "return apply_rope_eager(values, angles, inverse=inverse)",
        "return apply_rope_eager(values, angles, inverse=not inverse)",
    ),
    "in-place-eager-fallback-ignores-inverse": (
        "        rotate_in_place_eagerly(values, angles, inverse)\n        return\n",
        "        rotate_in_place_eagerly(values, angles, False)\n        return\n",
    ),
    "uncalibrated-device-fallback-ignores-inverse": (
        "return apply_rope_eager(values, angles, inverse=negate_sin)",
        "return apply_rope_eager(values, angles)",
    ),
    # In place.
    "in-place-rotates-a-copy": (
        "rotate(values, angles, inverse, in_place=True)",
        "rotate(values, angles, inverse, in_place=False)",
    ),
    "in-place-version-not-bumped": (
        "torch.autograd.graph.increment_version(values)  # a kernel's",
        "pass  # a kernel's",
    ),
    # Calibration.
    "calibration-trusts-the-last-segment": ("uniform &= set(names)", "uniform = set(names)"),
}

# Mutations of lines one backend never runs (the kernel's helpers differ: numpy under the interpreter, libdevice on
# CUDA), or whose bits only one backend can tell apart.
BACKEND_ONLY = {
    "interpreter": {
        "bf16-widening-by-cast": "on CUDA, widening BF16 by a cast is exact; the interpreter gets subnormals wrong",
        "bf16-truncating-cast": "the interpreter's narrowing on the bit pattern; CUDA narrows with the conversion "
        "instruction (native-narrowing-truncates)",
        "bf16-tie-rounds-half-up": "the interpreter's narrowing on the bit pattern; CUDA narrows with the conversion "
        "instruction",
        # On the H200 this mutant passes every probe, FP32 NaN payloads included.
        "nan-not-canonical": "on CUDA, the GPU's float32 fma and multiply already return the canonical NaN 0x7FFFFFFF",
    },
    "cuda": {
        "native-narrowing-truncates": "the interpreter narrows on the bit pattern; this line runs on CUDA",
        "none-variant-left-to-fp-fusion": "numpy, which the interpreter runs, never contracts a product into an add",
        "rounded-product-left-to-fp-fusion": "the interpreter's helper is a plain product; this line runs on CUDA",
        "subnormal-sin-flushed": "the interpreter computes cos/sin with numpy; this line runs on CUDA",
    },
}


# Layout mutations: RE-TARGET when the launcher's stride handling changes.
# Each entry models a slip in the launcher's handling of strides that only a generated layout exposes (its comment says
# which slip, so it can be re-targeted to a new kernel text; docs/conformance.md has the table). Each must keep every
# read inside the tensors LAYOUT_PROBES hand it (a mutant reading out of bounds could kill the process or, on a GPU,
# the CUDA context), which is why the probes' storages have room beyond their views.
LAYOUT_MUTATIONS = {
    # A size-1 dimension's stride used as if it addressed something: with a sequence of one position, the batch
    # stride taken from the sequence's, right only when x[:, t:t+1] is a tensor of its own (a decoding step sliced from
    # a longer buffer, one angle row per sequence).
    "batch-stride-from-a-size1-sequence": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch if tensor.shape[1] > 1 else tensor.stride(1), sequence, head[0] if four_d else 0, "
        "tensor.stride(-1)",
    ),
    # A zero channel stride taken for contiguous channels: an expanded upstream gradient (what output.sum() sends
    # back) read as if its row held C different values.
    "zero-channel-stride-read-as-contiguous": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1) or 1",
    ),
    # An expanded (stride-0) batch taken for a canonical one: values expanded over the batch read S rows further on
    # for each batch.
    "expanded-batch-read-as-canonical": (
        "return batch, sequence, head[0] if four_d else 0, tensor.stride(-1)",
        "return batch or tensor.shape[1] * tensor.stride(1), sequence, head[0] if four_d else 0, tensor.stride(-1)",
    ),
    # The frequencies assumed to be laid out as a contiguous tensor of their shape: angles stored in another order
    # ([S, B, P] storage viewed as [B, S, P]) or sliced with a step are read in the wrong places.
    "frequencies-assumed-contiguous": (
        "return strides_as_indexed(frequencies, 3)",
        "return strides_as_indexed(frequencies.contiguous(), 3)",
    ),
}


# Mutations that break the kernel's default variant on the calibration's own operands. On CUDA each then calibrates
# to no variant and every call falls back to the eager path, so the bit probes pass (as seen on the H200) and only the
# calibration probe catches them. It must, on every backend.
CAUGHT_BY_CALIBRATION = [
    "real-part-fuses-second-product",
    "imaginary-part-fuses-second-product",
    "real-part-unfused",
    "imaginary-part-unfused",
    "frequencies-shared-across-positions",
]

# The kernel module each mutation edits.
TARGETS = {
    "real-part-fuses-second-product": "float_ops.py",
    "imaginary-part-fuses-second-product": "float_ops.py",
    "real-part-unfused": "float_ops.py",
    "imaginary-part-unfused": "float_ops.py",
    "second-variant-computes-first": "float_ops.py",
    "none-variant-left-to-fp-fusion": "float_ops.py",
    "rounded-product-left-to-fp-fusion": "float_ops.py",
    "bf16-truncating-cast": "float_ops.py",
    "bf16-tie-rounds-half-up": "float_ops.py",
    "native-narrowing-truncates": "float_ops.py",
    "bf16-widening-by-cast": "float_ops.py",
    "nan-not-canonical": "float_ops.py",
    "negation-as-subtraction": "float_ops.py",
    "rotary-block-one-pair-early": "launch.py",
    "head-read-with-sequence-stride": "rotary_kernel.py",
    "output-written-with-values-strides": "rotary_kernel.py",
    "frequencies-shared-by-the-batch": "rotary_kernel.py",
    "frequencies-shared-across-positions": "rotary_kernel.py",
    "shared-frequencies-of-a-row-counted-across-the-batch": "rotary_kernel.py",
    "first-row-counted-across-the-batch": "rotary_kernel.py",
    "batch-magic-number-rounded-down": "launch.py",
    "batch-quotient-without-the-dividend": "float_ops.py",
    "frequency-pair-stride-ignored": "rotary_kernel.py",
    "pair-parts-swapped": "rotary_kernel.py",
    "copy-last-whole-chunk-skipped": "rotary_kernel.py",
    "copy-remainder-skipped": "rotary_kernel.py",
    "rotary-chunks-after-the-first-skipped": "rotary_kernel.py",
    "first-rotary-chunk-loaded-from-the-second": "rotary_kernel.py",
    "subnormal-sin-flushed": "float_ops.py",
    "inverse-ignored": "rotary_kernel.py",
    "conjugate-not-passed-to-the-kernel": "launch.py",
    "sign-flip-as-or": "float_ops.py",
    "backward-without-conjugate": "operators.py",
    "eager-fallback-conjugate-lost": "eager_path.py",
    "eager-fallback-ignores-inverse": "api.py",
    "eager-fallback-rotates-forward-by-the-conjugate": "api.py",
    "in-place-eager-fallback-ignores-inverse": "operators.py",
    "uncalibrated-device-fallback-ignores-inverse": "operators.py",
    "in-place-rotates-a-copy": "operators.py",
    "in-place-version-not-bumped": "operators.py",
    "calibration-trusts-the-last-segment": "calibration.py",
    "batch-stride-from-a-size1-sequence": "launch.py",
    "zero-channel-stride-read-as-contiguous": "launch.py",
    "expanded-batch-read-as-canonical": "launch.py",
    "frequencies-assumed-contiguous": "launch.py",
}
