"""The float32 arithmetic of one rotary pair, as the device's eager path rounds it: widening and narrowing the storage
dtype, a product rounded once, cos/sin of the angle, and the complex multiply in each contraction variant.

On the GPU these are single instructions (or libdevice calls); Triton's interpreter (numpy) truncates float32 ->
bfloat16, widens bfloat16 subnormals wrongly and, in some releases, rounds ``tl.fma`` twice, so there the same steps
are integer operations on the bit patterns, or an fma in float64 rounded to odd, with the same results.
"""

from __future__ import annotations

from .runtime import HAVE_TRITON, INTERPRETED, libdevice, tl, triton

__all__ = [
    "complex_multiply",
    "cos_sin",
    "divide",
    "flip_sign",
    "fma",
    "from_float32",
    "negate",
    "rounded_product",
    "to_float32",
]

if HAVE_TRITON:

    @triton.jit
    def negate(x):
        """-x by flipping the sign bit: on the H200 with Triton 3.6, unary minus gave +0 for -(+0) (as 0 - x would)."""
        return (x.to(tl.uint32, bitcast=True) ^ 0x80000000).to(tl.float32, bitcast=True)

    @triton.jit
    def flip_sign(x, sign_bit):
        """``x`` with its sign bit XORed with ``sign_bit`` (0: ``x``; the int32 sign bit: ``negate(x)``)."""
        return (x.to(tl.int32, bitcast=True) ^ sign_bit).to(tl.float32, bitcast=True)

    if INTERPRETED:

        @triton.jit
        def to_float32(x):
            """Widen BF16/FP16/FP32 to float32 exactly. The interpreter widens BF16 subnormals wrongly, so BF16 is
            widened by shifting its bits into the high half."""
            if x.dtype == tl.bfloat16:
                return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
            else:
                return x.to(tl.float32)

        @triton.jit
        def from_float32(r, dtype: tl.constexpr):
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
        def rounded_product(a, b):
            """``a * b`` rounded once (numpy, which the interpreter runs, never contracts it)."""
            return a * b

        @triton.jit
        def fma(a, b, c):
            """``a * b + c`` rounded once, as the GPU's fma: some interpreters' ``tl.fma`` rounds twice. float64 holds
            the product exactly; its sum with ``c`` is rounded to odd (nearest, then one step toward the exact sum
            where that was inexact and the last bit even), which leaves the rounding to float32 the only one."""
            product = a.to(tl.float64) * b.to(tl.float64)
            addend = c.to(tl.float64)
            total = product + addend
            part = total - product
            error = (product - (total - part)) + (addend - part)
            bits = total.to(tl.int64, bitcast=True)
            finite = (bits & 0x7FF0000000000000) != 0x7FF0000000000000
            step = tl.where((error > 0) == (total > 0), 1, -1)
            odd = tl.where(finite & (error != 0) & ((bits & 1) == 0), bits + step, bits)
            return odd.to(tl.float64, bitcast=True).to(tl.float32)

        @triton.jit
        def cos_sin(angle):
            """cos and sin of float32 angles (numpy's under the interpreter); ``sin x = x`` for subnormal x."""
            subnormal = (angle.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) < 0x00800000
            return tl.cos(angle), tl.where(subnormal, angle, tl.sin(angle))

    else:

        @triton.jit
        def to_float32(x):
            """Widen BF16/FP16/FP32 to float32: exact on the GPU, one conversion instruction."""
            return x.to(tl.float32)

        @triton.jit
        def from_float32(r, dtype: tl.constexpr):
            """Round float32 to ``dtype`` with the GPU's round-to-nearest-even conversion. Every NaN of the rotation
            comes out of the GPU's fma or multiply as the canonical float32 NaN, which converts to CUDA's canonical
            0x7FFF: no step of its own canonicalizes (on the H200 the suite's NaN inputs, payloads included, give
            eager's bits in every forward comparison)."""
            return r.to(dtype)

        @triton.jit
        def rounded_product(a, b):
            """``a * b`` rounded once. PTX's ``mul`` with an explicit rounding mode is never contracted into a
            neighbouring add, which Triton's default fp-fusion would otherwise do; libdevice's ``__nv_fmul_rn`` is no
            substitute: Triton links libdevice with flush-to-zero, so it flushes subnormals (seen on the H200)."""
            return tl.inline_asm_elementwise(
                "mul.rn.f32 $0, $1, $2;", "=f,f,f", [a, b], dtype=tl.float32, is_pure=True, pack=1
            )

        @triton.jit
        def fma(a, b, c):
            """``a * b + c`` rounded once: the GPU's fma instruction."""
            return tl.fma(a, b, c)

        @triton.jit
        def cos_sin(angle):
            """cos and sin of float32 angles with libdevice, as eager CUDA computes them. Triton links libdevice
            with flush-to-zero, so its ``sinf`` returns 0 for subnormal angles, where eager returns the angle."""
            subnormal = (angle.to(tl.uint32, bitcast=True) & 0x7FFFFFFF) < 0x00800000
            return libdevice.cos(angle), tl.where(subnormal, angle, libdevice.sin(angle))

    @triton.jit
    def complex_multiply(x0, x1, cos, sin, REAL: tl.constexpr, IMAG: tl.constexpr):
        """``(x0 + i x1) * (cos + i sin)`` in float32, each part contracted as REAL/IMAG say: the first product
        fused (``first``), the second fused (``second``), or both rounded (``none``)."""
        if REAL == "first":
            real = fma(x0, cos, negate(rounded_product(x1, sin)))
        elif REAL == "second":
            real = fma(negate(x1), sin, rounded_product(x0, cos))
        else:
            real = rounded_product(x0, cos) - rounded_product(x1, sin)
        if IMAG == "first":
            imag = fma(x0, sin, rounded_product(x1, cos))
        elif IMAG == "second":
            imag = fma(x1, cos, rounded_product(x0, sin))
        else:
            imag = rounded_product(x0, sin) + rounded_product(x1, cos)
        return real, imag

    @triton.jit
    def divide(dividend, magic, shift):
        """``dividend // divisor`` for ``0 <= dividend < 2**31``, given ``(magic, shift) = _division_magic(divisor)``.
        The sum exceeds int32's range for large dividends (it stays below 2**32), so it is shifted as unsigned."""
        total = tl.umulhi(dividend, magic) + dividend  # umulhi: of the unsigned product
        return (total.to(tl.uint32, bitcast=True) >> shift).to(tl.int32, bitcast=True)
