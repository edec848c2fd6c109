"""Dispatch and fallback: which inputs run the kernel, and that every other accepted input gets the eager bits.

The rule: for every input the eager path accepts, ``apply_rope_triton`` returns the eager path's bits, fused or by
falling back. Fallbacks: float64 angles (eager then multiplies in complex128), angles that require grad (the kernel
gives angles no gradient), dtypes outside BF16/FP16/FP32, angle shapes the kernel does not index, and non-CUDA
tensors unless Triton's interpreter is on.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from dsv41_rope.conformance import checks
from dsv41_rope.conformance.cases import DTYPES
from dsv41_rope.oracle.rounding import bits


def _inputs(device, dtype=torch.bfloat16, shape=(2, 6, 3, 40), pairs=8, angle_shape=None, angle_dtype=torch.float32):
    generator = torch.Generator().manual_seed(sum(shape) + pairs)
    values = torch.randn(shape, generator=generator).to(dtype).to(device)
    angle_shape = angle_shape or (1, shape[1], pairs)
    angles = (torch.randn(angle_shape, generator=generator, dtype=torch.float64) * 100).to(angle_dtype).to(device)
    return values, angles


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("rank", [3, 4], ids=["3d", "4d"])
def test_supported_inputs_run_the_kernel(rope, device, dtype, rank):
    shape = (2, 6, 3, 40) if rank == 4 else (2, 6, 40)
    values, angles = _inputs(device, dtype, shape)
    assert rope.uses_fused_kernel(values, angles)


@pytest.mark.parametrize(
    ("label", "dtype", "angle_dtype", "angle_shape", "angles_require_grad"),
    [
        ("fp64-angles", torch.bfloat16, torch.float64, None, False),
        ("angles-require-grad", torch.float32, torch.float32, None, True),
        ("fp64-values", torch.float64, torch.float32, None, False),
        ("angles-2d-broadcast-over-heads", torch.float32, torch.float32, (6, 8), False),
    ],
)
def test_fallbacks_return_eager_bits(rope, device, label, dtype, angle_dtype, angle_shape, angles_require_grad):
    shape = (2, 6, 8, 16) if label == "angles-2d-broadcast-over-heads" else (2, 6, 3, 40)
    values, angles = _inputs(device, dtype, shape, pairs=8, angle_shape=angle_shape, angle_dtype=angle_dtype)
    angles.requires_grad_(angles_require_grad)
    assert not rope.uses_fused_kernel(values, angles), label
    output = rope.apply_rope_triton(values, angles, inverse=False)
    assert torch.equal(bits(output), bits(rope.apply_rope_eager(values, angles, inverse=False)))


def test_angles_requiring_grad_get_eager_gradient(rope, device):
    values, angles = _inputs(device, torch.float32)
    values.requires_grad_(True)
    angles.requires_grad_(True)
    output = rope.apply_rope_triton(values, angles, inverse=False)
    upstream = torch.randn(output.shape, generator=torch.Generator().manual_seed(5)).to(device)
    fused_grads = torch.autograd.grad(output, (values, angles), upstream)
    eager_grads = torch.autograd.grad(rope.apply_rope_eager(values, angles, inverse=False), (values, angles), upstream)
    for fused, eager in zip(fused_grads, eager_grads, strict=True):
        assert torch.equal(bits(fused), bits(eager))


def test_angles_requiring_grad_under_no_grad_run_the_kernel(rope, device):
    values, angles = _inputs(device, torch.float32)
    angles.requires_grad_(True)
    with torch.no_grad():
        assert rope.uses_fused_kernel(values, angles)


def test_cpu_tensors_take_the_eager_path_without_the_interpreter(rope, monkeypatch):
    values, angles = _inputs(torch.device("cpu"))
    monkeypatch.setattr(rope.inputs, "INTERPRETED", False)
    assert not rope.uses_fused_kernel(values, angles)
    assert torch.equal(bits(rope.apply_rope_triton(values, angles)), bits(rope.apply_rope_eager(values, angles)))


@pytest.mark.compile_bound
@pytest.mark.parametrize(
    ("label", "values_shape", "angle_shape"),
    [
        ("3d-angles-1d", (2, 6, 40), (8,)),
        ("3d-angles-2d", (2, 6, 40), (6, 8)),
        ("angles-broadcast-over-sequence", (2, 6, 3, 40), (2, 1, 8)),
        ("angles-broadcast-over-batch", (3, 6, 3, 40), (1, 6, 8)),
        ("per-batch-angles-transposed", (3, 6, 3, 40), (3, 6, 8)),
    ],
)
def test_broadcast_angles_run_fused_with_eager_bits(rope, device, label, values_shape, angle_shape):
    values, angles = _inputs(device, torch.bfloat16, values_shape, angle_shape=angle_shape)
    if label.endswith("transposed"):
        values = values.transpose(1, 2).contiguous().transpose(1, 2)
    assert rope.uses_fused_kernel(values, angles), label
    fused = rope.apply_rope_triton(values, angles, inverse=True)
    frequencies = torch.polar(torch.ones_like(angles), angles)
    from dsv41_rope.oracle import eager

    expected = eager.apply_rope(values.cpu(), frequencies.cpu(), inverse=True)
    assert torch.equal(bits(fused.cpu()), bits(expected))


@pytest.mark.parametrize("shape", [(1, 1, 3), (1, 1, 1, 37)], ids=["3d", "4d"])
def test_eager_path_takes_a_rotary_block_starting_mid_pair(rope, device, shape):
    """FP32 rows of an odd channel count under size-1 leading dimensions: the rotary block is contiguous but starts at
    an odd storage offset, which Automodel's code cannot view as complex. The eager path (the fallback, and the
    suite's eager reference) rotates it as it rotates the same values in a tensor of its own."""
    values, angles = _inputs(device, torch.float32, shape, pairs=1, angle_shape=(1, 1, 1))
    assert values[..., -2:].storage_offset() % 2 == 1
    rotary = values[..., -2:]
    expected = rope.apply_rope_eager(rotary.clone(), angles, inverse=True)
    assert torch.equal(bits(rope.apply_rope_eager(values, angles, inverse=True)[..., -2:]), bits(expected))
    rope.eager_path.rotate_in_place_eagerly(values, angles, True)
    assert torch.equal(bits(values[..., -2:]), bits(expected))


def test_output_is_new_contiguous_storage(rope, device):
    values, angles = _inputs(device)
    transposed = values.transpose(1, 2).contiguous().transpose(1, 2)
    output = rope.apply_rope_triton(transposed, angles)
    assert output.is_contiguous() and output.shape == transposed.shape
    assert output.untyped_storage().data_ptr() != transposed.untyped_storage().data_ptr()


def test_empty_sequence(rope, device):
    values, angles = _inputs(device, torch.bfloat16, (1, 0, 2, 16), pairs=4, angle_shape=(1, 0, 4))
    output = rope.apply_rope_triton(values, angles)
    assert output.shape == values.shape
    assert torch.equal(bits(output), bits(rope.apply_rope_eager(values, angles)))


def test_more_rows_than_the_kernel_indexes_take_the_eager_path(rope, device):
    # An expanded view has 2**32 rows without the memory; the kernel's 32-bit row index could not reach them.
    values = torch.zeros((1, 1, 1, 2), device=device).expand(2**16, 2**16, 1, 2)
    angles = torch.zeros((1, 2**16, 1), device=device)
    assert values.numel() // 2 > rope.configs.MAX_ROWS
    assert not rope.uses_fused_kernel(values, angles)


@pytest.mark.parametrize("rank", [3, 4], ids=["3d", "4d"])
@pytest.mark.parametrize("source", ["in-kernel", "table"])
def test_angles_shared_by_the_batch_are_not_copied_per_batch(rope, device, monkeypatch, rank, source):
    monkeypatch.setenv(rope.FREQUENCIES_VARIABLE, source)
    shape = (4, 6, 3, 40) if rank == 4 else (4, 6, 40)
    values, angles = _inputs(device, torch.bfloat16, shape, angle_shape=(1, 6, 8))
    launches = []
    launch = rope.launch.launch_kernel

    def spy(values, frequencies, output, **kwargs):
        launches.append((tuple(frequencies.shape), rope.launch.frequency_strides(frequencies)))
        launch(values, frequencies, output, **kwargs)

    monkeypatch.setattr(rope.operators, "launch_kernel", spy)
    rope.apply_rope_triton(values, angles)
    table = (1, 6, 8) if source == "in-kernel" else (1, 6, 8, 2)
    assert len(launches) == 1, "one launch for all 4 batch elements"
    assert launches[0][0] == table and launches[0][1][0] == 0, "one [1, S, P] table, read with batch stride 0"


def test_launch_plan_passes_every_kernel_parameter_in_order(rope, device):
    """The compiled kernel takes its parameters positionally: a plan whose arguments are out of order would lose
    the direct launch (the plan then falls back to Triton's ``kernel[grid]``)."""
    values, angles = _inputs(device)
    settings = rope.settings(device)
    plan = rope.launch.make_plan(values, angles, torch.empty_like(values), False, settings, None)
    assert list(plan.scalars) == rope.launch.KERNEL_SCALARS


@pytest.mark.gpu
def test_later_calls_launch_the_compiled_kernel_directly(rope, gpu, monkeypatch):
    monkeypatch.setattr(rope.launch, "PLANS", {})
    values, angles = _inputs(gpu, shape=(1, 7, 3, 40))
    first = rope.apply_rope_triton(values, angles)
    (plan,) = rope.launch.PLANS.values()
    assert plan.compiled is not None, "the first launch kept no compiled kernel"
    assert torch.equal(bits(rope.apply_rope_triton(values, angles)), bits(first))


@pytest.mark.parametrize("source", ["in-kernel", "table"])
@pytest.mark.parametrize(
    ("shape", "angle_shape", "block_rows"),
    [((2, 6, 4, 40), (2, 6, 8), 4), ((1, 5, 8, 64), (1, 5, 8), 2)],
    ids=["per-batch-angles-4-rows", "shared-angles-2-rows"],
)
def test_programs_whose_rows_share_a_position_compute_its_frequencies_once(
    rope, device, monkeypatch, source, shape, angle_shape, block_rows
):
    """Rows per program dividing the heads: a program's rows are heads of one position and share one row of cos/sin
    (the GPU's launches for DeepSeek's heads; the interpreter's own configuration takes larger programs)."""
    from dsv41_rope.oracle import eager

    monkeypatch.setenv(rope.FREQUENCIES_VARIABLE, source)
    values, angles = _inputs(device, torch.float32, shape, angle_shape=angle_shape)
    config = rope.LaunchConfig(block_rows=block_rows, copy_channels=32, rotary_channels=16, num_warps=4)
    settings = rope.settings(device)
    plan = rope.launch.make_plan(values, angles, torch.empty_like(values), False, settings, config)
    assert plan.scalars["SHARED_FREQUENCIES"]
    output = rope.rotate(values, angles, False, config=config)
    frequencies = checks.kernel_frequencies_of(angles, rope).cpu()
    expected = eager.apply_rope(values.cpu(), frequencies, contraction=checks.contraction_of(device))
    assert torch.equal(bits(output.cpu()), bits(expected))


# Launch configurations that reach every path of the kernel's two loops on the shapes below (copied channels 27 and
# 24, rotary blocks of 10 and 16 channels): whole copied chunks and a remainder, a remainder alone, several rotary
# chunks with a partial last one, one row a program, rows per program that share a position or not, and programs with
# masked rows past the tensor. The interpreter's own launches take each part in one chunk; the GPU's configurations
# (the sweeps' and the rule's) take others, so CI runs them all here.
LAUNCH_PATHS = {
    "small-chunks": {"block_rows": 2, "copy_channels": 8, "rotary_channels": 4, "num_warps": 4},
    "copied-remainder-only": {"block_rows": 4, "copy_channels": 32, "rotary_channels": 16, "num_warps": 2},
    "one-row-a-program": {"block_rows": 1, "copy_channels": 16, "rotary_channels": 8, "num_warps": 2},
    "rows-past-the-tensor": {"block_rows": 64, "copy_channels": 8, "rotary_channels": 16, "num_warps": 4},
}


@pytest.mark.parametrize("in_place", [False, True], ids=["out-of-place", "in-place"])
@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize(("shape", "pairs"), [((2, 5, 3, 37), 5), ((2, 6, 40), 8)], ids=["4d-odd", "3d"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("path", list(LAUNCH_PATHS))
def test_every_launch_path_matches_the_oracle(rope, device, path, dtype, shape, pairs, inverse, in_place):
    from dsv41_rope.oracle import eager

    values, angles = _inputs(device, dtype, shape, pairs=pairs)
    config = rope.LaunchConfig(**LAUNCH_PATHS[path])
    output = rope.rotate(values.clone() if in_place else values, angles, inverse, in_place=in_place, config=config)
    frequencies = checks.kernel_frequencies_of(angles, rope).cpu()
    expected = eager.apply_rope(values.cpu(), frequencies, inverse=inverse, contraction=checks.contraction_of(device))
    differ = bits(output.cpu()) != bits(expected)
    assert not differ.any(), (
        f"{path} {LAUNCH_PATHS[path]}: {int(differ.sum())} elements differ from the oracle, first at "
        f"{tuple(differ.nonzero()[0].tolist())}"
    )


@pytest.mark.parametrize(
    ("shape", "strides", "other_strides"),
    [
        ((1, 6, 3, 40), (720, 120, 40, 1), (7, 120, 40, 1)),
        ((2, 6, 1, 40), (240, 40, 40, 1), (240, 40, 3, 1)),
        ((2, 1, 40), (40, 40, 1), (40, 17, 1)),
    ],
    ids=["size1-batch", "size1-heads", "size1-sequence"],
)
def test_layouts_differing_only_in_a_size1_stride_share_a_build(rope, device, shape, strides, other_strides):
    """A size-1 dimension's index is always 0, so its stride addresses nothing: layouts that differ only there (a
    one-token step sliced from a longer buffer, against the same step as a tensor of its own) get the same kernel
    arguments, hence one compiled specialization, instead of a build each."""
    storage = torch.zeros(2048, dtype=torch.bfloat16, device=device)
    values = storage.as_strided(shape, strides)
    other = storage.as_strided(shape, other_strides)
    angles = torch.zeros((1, shape[1], 8), device=device)
    settings = rope.settings(device)
    plans = [
        rope.launch.make_plan(v, angles, torch.empty(shape, dtype=v.dtype, device=device), False, settings, None)
        for v in (values, other)
    ]
    assert plans[0].scalars == plans[1].scalars, (
        f"strides {strides} and {other_strides} of a {shape} tensor: kernel arguments {plans[0].scalars} and "
        f"{plans[1].scalars}"
    )


def test_the_gpu_rule_computes_cos_sin_for_at_most_2_pairs_a_thread_below_8_warps(rope, monkeypatch):
    """The GPU's launch rule (the sweeps' DeepSeek configurations and the general rule): a thread inlines libdevice's
    cos and sin for every pair it holds, so a program computing more than 2 pairs a thread gets more warps, up to 8
    (programs of thousands of instructions otherwise made most of the suite's fresh-build time)."""
    monkeypatch.setattr(rope.configs, "INTERPRETED", False)  # the interpreter's own configurations are not the GPU's
    crowded = []
    for element_size in (2, 4):
        for heads in (1, 2, 3, 8, 32, 64, 128):
            for channels, pairs in ((2, 1), (16, 2), (40, 8), (37, 5), (64, 32), (128, 32), (512, 32), (1024, 256)):
                for rows_per_head in (1, 7, 64, 4096):
                    for in_place in (False, True):
                        rows = rows_per_head * heads
                        config = rope.launch_config(rows, channels, pairs, element_size, heads, in_place)
                        shared = rope.configs.shares_frequencies(heads, config.block_rows)
                        frequency_rows = 1 if shared else config.block_rows
                        per_thread = frequency_rows * (config.rotary_channels // 2) / (32 * config.num_warps)
                        if config.num_warps < 8 and per_thread > 2:
                            crowded.append((rows, channels, pairs, element_size, heads, in_place, config, per_thread))
    assert not crowded, f"{len(crowded)} launches compute cos/sin for more than 2 pairs a thread, e.g. {crowded[:3]}"


# Divisors: 1, powers of two and their neighbours, the programs a batch element takes on this file's shapes, and the
# largest; dividends: the first ids, each side of the divisor's multiples, and the largest program ids a grid has, where
# the kernel's sum leaves int32's range.
DIVISORS = [1, 2, 3, 5, 6, 7, 15, 255, 256, 257, 4095, 65537, 2**30 - 1, 2**30, 2**30 + 1, 2**31 - 1]

# A kernel that applies the kernel's division helper to a block of dividends, which it finds as a global of a file of
# its own (Triton reads a kernel's source). Not passed as an argument: on CUDA the suite's compile lock, a Triton hook,
# serializes a launch's constants to JSON, which a function is not.
_QUOTIENTS_SOURCE = """
import triton
import triton.language as tl

divide = None  # the kernel's helper, set before the first launch


@triton.jit
def quotients_kernel(dividends_ptr, quotients_ptr, count, magic, shift, BLOCK: tl.constexpr):
    index = tl.arange(0, BLOCK)
    dividends = tl.load(dividends_ptr + index, mask=index < count)
    tl.store(quotients_ptr + index, divide(dividends, magic, shift), mask=index < count)
"""


@pytest.fixture(scope="module")
def quotients_kernel(rope, tmp_path_factory):
    path = tmp_path_factory.mktemp("division") / "division_probe.py"
    path.write_text(_QUOTIENTS_SOURCE)
    spec = importlib.util.spec_from_file_location(f"division_probe_{id(rope)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.divide = rope.float_ops.divide
    return module.quotients_kernel


def _dividends(divisor: int) -> list[int]:
    near_multiples = [k * divisor + r for k in (1, 2, 3, 1000, 2**31 // divisor) for r in (-1, 0, 1)]
    return sorted({n for n in [*range(64), *near_multiples, *range(2**31 - 64, 2**31)] if 0 <= n < 2**31})


@pytest.mark.parametrize("divisor", DIVISORS)
def test_the_kernel_divides_program_ids_exactly(rope, device, quotients_kernel, divisor):
    """A program's batch element is its id divided by the programs each one takes, computed as a multiply-high, an add
    and a shift with the launcher's magic number (``_division_magic``, ``_divide``): exact for every id a grid has."""
    magic, shift = rope.launch.division_magic(divisor)
    assert -(2**31) <= magic < 2**31, f"magic number {magic} of {divisor} is not an int32 kernel argument"
    dividends = torch.tensor(_dividends(divisor), dtype=torch.int32)
    block = 1 << (len(dividends) - 1).bit_length()
    on_device = dividends.to(device), torch.full_like(dividends, -1).to(device)
    quotients_kernel[(1,)](*on_device, len(dividends), magic, shift, block)
    got, expected = on_device[1].cpu().long(), dividends.long() // divisor
    wrong = (got != expected).nonzero().flatten()
    assert len(wrong) == 0, (
        f"{len(wrong)} of {len(dividends)} quotients by {divisor} wrong (magic {magic}, shift {shift}), first: "
        f"{int(dividends[wrong[0]])} // {divisor} gave {int(got[wrong[0]])}, not {int(expected[wrong[0]])}"
    )


@pytest.mark.parametrize("divisor", [0, -1, 2**31])
def test_division_magic_refuses_divisors_the_kernel_cannot_take(rope, divisor):
    with pytest.raises(ValueError, match="divides by 1 to 2\\*\\*31 - 1"):
        rope.launch.division_magic(divisor)
