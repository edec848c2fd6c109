"""The adapters run against the real code: ``torch.compile`` of the eager reference always, each peer where it is
installed (``pip install --no-deps`` its pin; flash-attention's sdist in ``$DSV41_PEER_WHEELS``), its Triton kernels
under the interpreter on a CPU.

A peer that is not installed skips here, saying so; its argument mapping is judged regardless, against a fake, in
tests/test_peers.py. Where a peer runs, its result is checked against the eager reference only as far as the
adapter answers for it (shape, dtype, copied channels, the rotation to within a few ulps): its bits are the
conformance suite's to judge. What these runs found about the peers is pinned down too: SGLang's flat kernel
overwrites the next row's channels past a rotary width that is not a power of two, Liger rotates a contiguous input
in place, Megatron's fused MLA rotary writes the de-interleaved layout, and the whole-graph compile fails.
"""

from __future__ import annotations

import contextlib
import inspect

import pytest
import torch

from dsv41_rope.kernel import apply_rope_eager
from dsv41_rope.peers import by_name, compiled, flash_rotary, huggingface, liger, megatron, nemo, sglang_rope

# (values shape, angles shape): a copied block before the rotary one, widths of power-of-two pairs.
SHAPES = {"4d": ((2, 3, 2, 12), (2, 3, 4)), "4d-shared": ((2, 3, 2, 12), (1, 3, 4)), "3d": ((2, 3, 10), (3, 4))}
# The pinned peers' parameters (names, in order), as the fakes of tests/test_peers.py take them.
PEER_PARAMETERS = {
    "nemo-rope-triton": (nemo.load_rope_triton, "apply_rope_triton", "values angles inverse"),
    "nemo-dsv4-eager": (nemo.load_dsv4_layers, "_apply_partial_rope_interleaved", "x cos sin rope_head_dim"),
    "hf-transformers-dsv4": (huggingface.load_modeling, "apply_rotary_pos_emb", "x cos sin unsqueeze_dim"),
    "sglang-dsv4-flat": (sglang_rope.load_dsv4_rope, "apply_rotary_emb_triton", "x freqs_cis positions inverse"),
    "flash-attn-rotary": (
        flash_rotary.load_rotary,
        "apply_rotary",
        "x cos sin seqlen_offsets cu_seqlens max_seqlen interleaved inplace conjugate",
    ),
    "liger-llama4-rope": (liger.load_llama4_rope, "LigerLlama4RopeFunction.forward", "ctx q k freqs_cis BLOCK_SIZE"),
    "megatron-interleaved": (
        megatron.load_rope_utils,
        "apply_rotary_pos_emb",
        "t freqs config cu_seqlens mscale cp_group mla_rotary_interleaved",
    ),
    "megatron-fused-mla": (
        megatron.load_fused_mla_rope,
        "fused_apply_mla_rope_for_q",
        "t cos sin qk_head_dim emb_dim cu_seqlens_q cp_rank cp_size rotary_interleaved",
    ),
}


def require(name: str) -> None:
    """Skips unless the peer ``name`` loads here, saying what was judged instead."""
    try:
        PEER_PARAMETERS[name][0]()
    except ModuleNotFoundError:
        pytest.skip(f"{by_name(name).pin} is not here: only its argument mapping was judged (tests/test_peers.py)")


def inputs(shape: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    values_shape, angles_shape = SHAPES[shape]
    generator = torch.Generator().manual_seed(7)
    return torch.randn(values_shape, generator=generator).to(dtype), torch.randn(angles_shape, generator=generator)


def close_to_eager(result: torch.Tensor, values: torch.Tensor, angles: torch.Tensor, inverse: bool) -> None:
    """The adapter's share: eager's shape and dtype, the copied channels bit for bit, the rotation to a few ulps."""
    expected = apply_rope_eager(values, angles, inverse=inverse)
    assert (result.shape, result.dtype) == (expected.shape, expected.dtype), f"{result.shape} {result.dtype}"
    copied = values.shape[-1] - 2 * angles.shape[-1]
    assert torch.equal(result[..., :copied], values[..., :copied]), "the copied channels are not the input's"
    ulp = torch.finfo(values.dtype).eps
    torch.testing.assert_close(result.float(), expected.float(), rtol=4 * ulp, atol=4 * ulp)


@pytest.mark.parametrize("name", PEER_PARAMETERS)
def test_the_fakes_take_what_the_pinned_peers_take(name):
    require(name)
    loader, attribute, expected = PEER_PARAMETERS[name]
    target = loader()
    for part in attribute.split("."):
        target = getattr(target, part)
    received = " ".join(inspect.signature(target).parameters)
    assert received == expected, f"{by_name(name).pin} {attribute}: parameters {received!r}, expected {expected!r}"


def test_compiled_reference_gives_eager_bits_forward_inverse_and_backward():
    values, angles = inputs("4d", torch.bfloat16)
    values.requires_grad_(True)
    for inverse in (False, True):
        result = compiled.apply_rope_compiled(values, angles, inverse=inverse)
        expected = apply_rope_eager(values, angles, inverse=inverse)
        assert torch.equal(result, expected), f"inverse={inverse}: compiled bits differ from eager's"
        gradient = torch.randn_like(expected)
        (received,) = torch.autograd.grad(result, values, gradient)
        assert torch.equal(received, torch.autograd.grad(expected, values, gradient)[0]), "the backward differs"


def test_compiling_the_reference_as_one_graph_fails_at_its_storage_offset_guard():
    with pytest.raises(torch._dynamo.exc.Unsupported, match=r"(?s)storage_offset"):
        compiled.apply_rope_compiled_fullgraph(*inputs("3d", torch.float32))


PYTORCH_PEERS = {
    "nemo-rope-triton": nemo.apply_rope_nemo_triton,  # off CUDA its eager fallback runs
    "nemo-dsv4-eager": nemo.apply_rope_nemo_dsv4,
    "hf-transformers-dsv4": huggingface.apply_rope_hf_dsv4,
    "megatron-interleaved": megatron.apply_rope_megatron_interleaved,
}


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name", PYTORCH_PEERS)
def test_pytorch_peers_rotate_like_eager_and_differentiate(name, shape, inverse):
    require(name)
    values, angles = inputs(shape, torch.float32)
    values.requires_grad_(True)
    result = PYTORCH_PEERS[name](values, angles, inverse=inverse)
    close_to_eager(result.detach(), values.detach(), angles, inverse)
    gradient = torch.randn_like(result)
    (received,) = torch.autograd.grad(result, values, gradient)
    close_to_eager(received, gradient, angles, not inverse)  # the backward: the conjugate rotation of the gradient


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "adapter", ["apply_rope_sglang_per_token", "apply_rope_sglang_batched", "apply_rope_sglang_flat"]
)
def test_sglang_kernels_rotate_like_eager_at_a_power_of_two_width(adapter, shape, inverse):
    require("sglang-dsv4-flat")
    values, angles = inputs(shape, torch.float32)
    close_to_eager(getattr(sglang_rope, adapter)(values, angles, inverse=inverse), values, angles, inverse)


def test_sglang_flat_kernel_overwrites_the_next_rows_channels_past_a_width_not_a_power_of_two():
    require("sglang-dsv4-flat")
    values, angles = torch.randn(1, 2, 3, 10), torch.randn(1, 2, 3)  # rope_dim 6: the kernel's tile is 8 wide
    for adapter in (sglang_rope.apply_rope_sglang_per_token, sglang_rope.apply_rope_sglang_batched):
        close_to_eager(adapter(values, angles), values, angles, False)
    result = sglang_rope.apply_rope_sglang_flat(values, angles)
    rows = result.reshape(-1, 10)
    assert not torch.equal(rows[1:, :2], values.reshape(-1, 10)[1:, :2]), "sglang#35096 no longer shows"
    assert torch.equal(rows[:, 2:4], values.reshape(-1, 10)[:, 2:4]), "only the 2 columns past each row are written"


@pytest.mark.parametrize("shape", SHAPES)
def test_flash_attention_rotates_like_eager(monkeypatch, shape):
    require("flash-attn-rotary")
    # apply_rotary enters torch.cuda.device(x.device.index), which a CPU tensor's index (None) breaks
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    values, angles = inputs(shape, torch.float32)
    for inverse in (False, True):
        close_to_eager(
            flash_rotary.apply_rope_flash_attention(values, angles, inverse=inverse), values, angles, inverse
        )


@pytest.mark.parametrize("shape", ["4d-shared", "3d"])
def test_liger_rotates_like_eager_and_differentiates(shape):
    require("liger-llama4-rope")
    values, angles = inputs(shape, torch.float32)
    values.requires_grad_(True)
    for inverse in (False, True):
        result = liger.apply_rope_liger_llama4(values, angles, inverse=inverse)
        close_to_eager(result.detach(), values.detach(), angles, inverse)
        gradient = torch.randn_like(result)
        (received,) = torch.autograd.grad(result, values, gradient.clone())  # its backward rotates in place
        close_to_eager(received, gradient, angles, not inverse)


def test_liger_rotates_a_contiguous_rotary_block_in_the_callers_tensor():
    require("liger-llama4-rope")
    values, angles = torch.randn(2, 3, 2, 8), torch.randn(1, 3, 4)  # channels == 2P: the block is the tensor
    before = values.clone()
    result = liger.apply_rope_liger_llama4(values, angles)
    close_to_eager(result, before, angles, False)
    assert torch.equal(values, result), "Liger no longer rotates its contiguous input in place"


def test_megatron_fused_mla_writes_real_parts_then_imaginary_parts(monkeypatch):
    require("megatron-fused-mla")
    fused = megatron.load_fused_mla_rope()
    # autotuning benchmarks each configuration on a GPU driver, which the interpreter lacks: one configuration
    monkeypatch.setattr(fused.rotary_fwd_q_kernel, "configs", fused.rotary_fwd_q_kernel.configs[:1])
    values, angles = inputs("4d-shared", torch.float32)
    result = megatron.apply_rope_megatron_fused_mla(values, angles)
    pairs = angles.shape[-1]
    de_interleaved = torch.cat((torch.arange(0, 2 * pairs, 2), torch.arange(1, 2 * pairs, 2)))
    expected = apply_rope_eager(values, angles)
    expected[..., -2 * pairs :] = expected[..., -2 * pairs :][..., de_interleaved]
    torch.testing.assert_close(result, expected, rtol=1e-6, atol=1e-6)
