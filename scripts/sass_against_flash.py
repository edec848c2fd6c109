"""Our in-place kernel's SASS beside flash-attention's in-place rotary's, off the GPU, for the small DeepSeek tensors.

Where the small tensors' in-place time goes, as far as the compiled code shows it: for each tensor and dtype, each
kernel's instructions, those issued before its first global load (a program's latency before its data is on the way),
its global loads and stores, branches and local-memory accesses. Ours is built as the launcher specializes it
(``scripts.build_cost``); flash-attention's ``rotary_kernel`` (``.peers/flash_attn_rotary.py``) as its
``apply_rotary(..., interleaved=True, inplace=True)`` launches it on the tensor's last ``2 * PAIRS`` channels, handed
float32 cos/sin tables (found as ``benchmarks.in_place`` finds it: ``$DSV41_FLASH_ROTARY`` or the file above). Needs
Triton 3.6.0's wheel on ``PYTHONPATH`` (``scripts.build_cost`` says how), no GPU::

    PYTHONPATH=/tmp/triton36/site python -m scripts.sass_against_flash
"""

from __future__ import annotations

import re
import sys

from benchmarks.in_place import load_flash_attention_rotary
from benchmarks.shapes import CASES, PAIRS
from scripts.build_cost import TRITON_TYPES, deepseek_builds, sass_lines, sm90_cubin

SMALL_TENSORS = ("window_kv", "compressed_kv", "index_keys")


def flash_build(sequence: int, channels: int, pointer_type: str) -> tuple[dict, dict, dict]:
    """flash-attention's specialization for ``[1, sequence, 1, channels]`` rotated in place on its last ``2 * PAIRS``
    channels (every size and stride a multiple of 16, pointers 16-byte aligned)."""
    runtime = {"SEQLEN_OFFSETS": 0, "seqlen": sequence, "seqlen_ro": sequence}
    runtime |= {
        f"stride_{t}_{d}": s
        for t in ("out", "x")
        for d, s in (("batch", sequence * channels), ("seqlen", channels), ("nheads", channels))
    }
    constant = {
        "CU_SEQLENS": None,
        "nheads": 1,
        "stride_out_headdim": 1,
        "stride_x_headdim": 1,
        "ROTARY_DIM": 2 * PAIRS,
    }
    constant |= {"IS_SEQLEN_OFFSETS_TENSOR": False, "IS_VARLEN": False, "INTERLEAVED": True, "CONJUGATE": False}
    constant |= {"BLOCK_H": 2, "BLOCK_M": 8 if 2 * PAIRS <= 128 else 4}
    names = ["OUT", "X", "COS", "SIN", "CU_SEQLENS", "SEQLEN_OFFSETS", "seqlen", "nheads", "seqlen_ro"]
    names += [f"stride_{t}_{d}" for t in ("out", "x") for d in ("batch", "seqlen", "nheads", "headdim")]
    names += ["ROTARY_DIM", "IS_SEQLEN_OFFSETS_TENSOR", "IS_VARLEN", "INTERLEAVED", "CONJUGATE", "BLOCK_H", "BLOCK_M"]
    pointers = {"OUT": pointer_type, "X": pointer_type, "COS": "*fp32", "SIN": "*fp32"}
    signature = {name: pointers.get(name, "constexpr" if name in constant else "i32") for name in names}
    constexprs = {(names.index(name),): value for name, value in constant.items()}
    divisible = [*pointers, *(name for name, value in runtime.items() if value % 16 == 0)]
    attrs = {(names.index(name),): [["tt.divisibility", 16]] for name in divisible}
    return signature, constexprs, attrs


def describe(lines: list[str]) -> str:
    """Instructions in all, before the first global load, and of a few kinds."""
    opcodes = [re.sub(r"^@!?U?P\w+\s+", "", line.split("*/", 1)[1].strip()).split()[0] for line in lines]
    first_load = next(index for index, opcode in enumerate(opcodes) if opcode.startswith("LDG"))
    count = {kind: sum(opcode.split(".")[0] == kind for opcode in opcodes) for kind in ("LDG", "STG", "BRA")}
    local = sum(opcode.split(".")[0] in ("LDL", "STL") for opcode in opcodes)
    return f"{len(lines):6d} {first_load:12d} {count['LDG']:4d} {count['STG']:4d} {count['BRA']:4d} {local:6d}"


def main() -> int:
    from triton.compiler import ASTSource

    from impl import rope_triton as rope

    apply_rotary, note = load_flash_attention_rotary()
    if apply_rotary is None:
        print(note, file=sys.stderr)
        return 2
    rotary_kernel = apply_rotary.__globals__["rotary_kernel"]
    print(
        f"{'tensor in place':<24} {'dtype':<9} {'kernel':<6} {'instr':>6} {'before load':>12} "
        f"{'LDG':>4} {'STG':>4} {'BRA':>4} {'LDL/STL':>6}"
    )
    for build in deepseek_builds(rope, [f"{name} in place" for name in SMALL_TENSORS]):
        dtype = str(build.dtype).removeprefix("torch.")
        ours = ASTSource(
            fn=rope._rope_kernel, signature=build.signature, constexprs=build.constexprs, attrs=build.attrs
        )
        ours_lines = sass_lines(sm90_cubin(ours, build.num_warps))
        shape = CASES[build.name.removesuffix(" in place")].shape
        signature, constexprs, attrs = flash_build(shape[1], shape[-1], f"*{TRITON_TYPES[build.dtype]}")
        theirs = ASTSource(fn=rotary_kernel, signature=signature, constexprs=constexprs, attrs=attrs)
        flash_lines = sass_lines(sm90_cubin(theirs, num_warps=4))
        print(f"{build.name:<24} {dtype:<9} {'ours':<6} {describe(ours_lines)}")
        print(f"{build.name:<24} {dtype:<9} {'flash':<6} {describe(flash_lines)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
