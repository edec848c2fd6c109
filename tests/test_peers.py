"""Each peer adapter hands its peer what that peer takes: a fake with the peer's signature replaces the peer (through
the adapter's loader), records what it received, and returns something simple, so these run with no peer installed.

Per adapter: which channels go in (a view of the last ``2P`` channels, or a copy, in the layout the peer's model
uses), the tables (shape, dtype, values, computed the way the peer's model code computes them), the conjugate by the
peer's own mechanism, and the copied channels and layout of what comes back. What the peer returns is passed on as
it is: each fake doubles (or, working in place, negates) what it is given, and the result must show exactly that.
tests/test_peer_runs.py runs the real peers where they are installed (docs/peers.md).
"""

from __future__ import annotations

import types

import pytest
import torch

from dsv41_rope.peers import flash_rotary, huggingface, liger, megatron, nemo, sglang_rope, vllm_rope

# (values shape, angles shape): P = angles.shape[-1] pairs rotate, the channels before them are copied.
CASES = {
    "4d-per-token": ((2, 3, 4, 12), (2, 3, 4)),
    "4d-shared-by-batch": ((2, 3, 4, 12), (1, 3, 4)),
    "4d-one-position": ((2, 3, 4, 12), (2, 1, 4)),
    "3d-per-token": ((2, 3, 10), (2, 3, 3)),
    "3d-sequence-angles": ((2, 3, 10), (3, 3)),
    "3d-one-row-of-angles": ((2, 3, 10), (3,)),
}
SHARED_BY_BATCH = {name for name, (_, angles) in CASES.items() if len(angles) < 3 or angles[0] == 1}


def inputs(case: str, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    values_shape, angles_shape = CASES[case]
    generator = torch.Generator().manual_seed(len(case))
    values = torch.randn(values_shape, generator=generator).to(dtype)
    return values, torch.randn(angles_shape, generator=generator) * 3


def full_angles(values: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """The angles as ``[B, S, P]``, one row per token."""
    return angles.reshape((1,) * (3 - angles.dim()) + tuple(angles.shape)).expand(*values.shape[:2], -1)


def expect_equal(name: str, received: torch.Tensor, expected: torch.Tensor) -> None:
    """Asserts equal shape, dtype and bits, saying what was received against what was expected."""
    assert received.shape == expected.shape and received.dtype == expected.dtype, (
        f"{name}: received {tuple(received.shape)} {received.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    )
    assert torch.equal(received, expected), f"{name}: values differ\nreceived {received}\nexpected {expected}"


def rotary_doubled(values: torch.Tensor, pairs: int, factor: float = 2.0) -> torch.Tensor:
    """``values`` with its last ``2 * pairs`` channels multiplied by ``factor``: what every adapter must return when
    its fake peer multiplies what it is given."""
    expected = values.clone()
    expected[..., -2 * pairs :] *= factor
    return expected


@pytest.fixture
def calls() -> list[dict]:
    return []


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
def test_nemo_rope_triton_gets_the_contract_with_angles_per_token(monkeypatch, calls, case, inverse):
    def apply_rope_triton(values, angles, *, inverse=False):
        calls.append({"values": values, "angles": angles, "inverse": inverse})
        return values * 2

    monkeypatch.setattr(nemo, "load_rope_triton", lambda: types.SimpleNamespace(apply_rope_triton=apply_rope_triton))
    values, angles = inputs(case)
    result = nemo.apply_rope_nemo_triton(values, angles, inverse=inverse)
    (call,) = calls
    assert call["values"] is values, "the values go in as they are"
    expect_equal("angles (expanded: the peer rejects broadcast angles)", call["angles"], full_angles(values, angles))
    assert call["inverse"] is inverse, f"inverse: received {call['inverse']}, expected {inverse}"
    expect_equal("result (the peer's own)", result, values * 2)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("case", CASES)
def test_nemo_dsv4_gets_heads_first_values_and_doubled_tables_in_the_values_dtype(
    monkeypatch, calls, case, dtype, inverse
):
    def _apply_partial_rope_interleaved(x, cos, sin, rope_head_dim):
        calls.append({"x": x, "cos": cos, "sin": sin, "rope_head_dim": rope_head_dim})
        return x * 2

    fake = types.SimpleNamespace(_apply_partial_rope_interleaved=_apply_partial_rope_interleaved)
    monkeypatch.setattr(nemo, "load_dsv4_layers", lambda: fake)
    values, angles = inputs(case, dtype)
    result = nemo.apply_rope_nemo_dsv4(values, angles, inverse=inverse)
    (call,) = calls
    heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)
    expect_equal("x ([B, H, S, D] as the model's queries)", call["x"], heads_first)
    assert call["x"].data_ptr() == values.data_ptr(), "x is a view of the values, not a copy"
    assert call["rope_head_dim"] == 2 * angles.shape[-1], f"rope_head_dim: received {call['rope_head_dim']}"
    doubled = torch.cat((angles,) * 2, dim=-1).reshape(call["cos"].shape)  # cat((freqs, freqs)), 3-D
    assert call["cos"].dim() == 3, f"cos must be [B or 1, S or 1, 2P]: received {tuple(call['cos'].shape)}"
    expect_equal("cos (float32 .cos(), cast to the values' dtype)", call["cos"], doubled.cos().to(dtype))
    sin = doubled.sin().to(dtype)
    expect_equal("sin (negated for the inverse)", call["sin"], -sin if inverse else sin)
    expect_equal("result (transposed back)", result, values * 2)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", CASES)
def test_transformers_gets_heads_first_values_and_half_width_tables_in_the_values_dtype(
    monkeypatch, calls, case, dtype, inverse
):
    def apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1):
        calls.append({"x": x, "cos": cos, "sin": sin, "unsqueeze_dim": unsqueeze_dim})
        return x * 2

    monkeypatch.setattr(
        huggingface, "load_modeling", lambda: types.SimpleNamespace(apply_rotary_pos_emb=apply_rotary_pos_emb)
    )
    values, angles = inputs(case, dtype)
    result = huggingface.apply_rope_hf_dsv4(values, angles, inverse=inverse)
    (call,) = calls
    heads_first = values.transpose(1, 2) if values.dim() == 4 else values.unsqueeze(1)
    expect_equal("x ([B, H, S, D] as the attention's)", call["x"], heads_first)
    assert call["unsqueeze_dim"] == 1, f"unsqueeze_dim: received {call['unsqueeze_dim']}, the model's is 1"
    table = angles.reshape(call["cos"].shape)
    assert call["cos"].shape[-1] == angles.shape[-1], "cos/sin are half width: one entry per pair"
    expect_equal("cos", call["cos"], table.cos().to(dtype))
    expect_equal(
        "sin (negated for the inverse)", call["sin"], -table.sin().to(dtype) if inverse else table.sin().to(dtype)
    )
    expect_equal("result (transposed back)", result, values * 2)


class FakeSglangRope:
    """SGLang's ``dsv4/rope.py`` surface: the batched switch and ``apply_rotary_emb_triton``, which negates ``x`` in
    place, as the peer rotates in place."""

    def __init__(self, calls: list[dict], batched: bool = False, fail: bool = False) -> None:
        self._USE_BATCHED_ROPE = batched
        self.calls = calls
        self.fail = fail

    def set_batched_rope(self, enabled: bool = True) -> None:
        self._USE_BATCHED_ROPE = enabled

    def apply_rotary_emb_triton(self, x, freqs_cis, positions=None, inverse=False):
        self.calls.append({"x": x.clone(), "stride": x.stride(), "batched": self._USE_BATCHED_ROPE, "inverse": inverse})
        self.calls[-1].update(freqs_cis=freqs_cis, positions=positions)
        if self.fail:
            raise RuntimeError("the kernel failed")
        x.neg_()
        return x


SGLANG_KERNELS = {  # adapter: (switch during the call, rows handed over)
    "apply_rope_sglang_per_token": (False, "tokens"),
    "apply_rope_sglang_batched": (True, "flat"),
    "apply_rope_sglang_flat": (True, "heads"),
}


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("adapter", SGLANG_KERNELS)
def test_sglang_gets_the_rotary_slice_of_a_copy_a_polar_table_and_positions(monkeypatch, calls, adapter, case, inverse):
    batched, rows = SGLANG_KERNELS[adapter]
    fake = FakeSglangRope(calls, batched=not batched)  # the switch the caller had, to be restored
    monkeypatch.setattr(sglang_rope, "load_dsv4_rope", lambda: fake)
    values, angles = inputs(case)
    before = values.clone()
    result = getattr(sglang_rope, adapter)(values, angles, inverse=inverse)
    (call,) = calls
    pairs, width = angles.shape[-1], 2 * angles.shape[-1]
    tokens, heads = values.shape[0] * values.shape[1], values.shape[2] if values.dim() == 4 else 1
    shape = {"flat": (tokens * heads, width), "heads": (tokens, heads, width)}.get(rows, (tokens, heads, width))
    if rows == "tokens" and values.dim() == 3:
        shape = (tokens, width)
    assert call["batched"] is batched, f"set_batched_rope during the call: received {call['batched']}"
    assert fake._USE_BATCHED_ROPE is not batched, "the caller's batched switch is restored"
    expect_equal("x (the rotary slice)", call["x"], values.reshape(*shape[:-1], -1)[..., -width:])
    assert call["stride"][-1] == 1 and call["stride"][0] == values.shape[-1] * (1 if rows == "flat" else heads)
    table = full_angles(values, angles).reshape(tokens, pairs)
    expect_equal("freqs_cis (complex64 torch.polar)", call["freqs_cis"], torch.polar(torch.ones_like(table), table))
    positions = torch.arange(tokens).repeat_interleave(heads if rows == "flat" else 1)
    expect_equal("positions", call["positions"], positions)
    assert call["inverse"] is inverse, f"inverse: received {call['inverse']}"
    expect_equal("values (untouched: the peer works on a copy)", values, before)
    expect_equal("result (the peer's in-place work)", result, rotary_doubled(values, pairs, -1.0))


def test_sglang_restores_the_batched_switch_when_the_kernel_raises(monkeypatch, calls):
    fake = FakeSglangRope(calls, batched=False, fail=True)
    monkeypatch.setattr(sglang_rope, "load_dsv4_rope", lambda: fake)
    with pytest.raises(RuntimeError, match="the kernel failed"):
        sglang_rope.apply_rope_sglang_flat(*inputs("4d-per-token"))
    assert fake._USE_BATCHED_ROPE is False


class FakeVllmRope:
    """vLLM's ``DeepseekV4ScalingRotaryEmbedding``: records its construction and call, returns ``query * 2``."""

    calls: list[dict] = []

    def __init__(self, head_size, rotary_dim, max_position_embeddings, base, is_neox_style, scaling_factor, dtype, *,
                 beta_fast=32, beta_slow=1, mscale=1, mscale_all_dim=0):  # fmt: skip
        self.calls.append({"init": (head_size, rotary_dim, max_position_embeddings, is_neox_style, scaling_factor)})
        self.calls[-1].update(dtype=dtype, mscale=mscale, mscale_all_dim=mscale_all_dim)

    def __call__(self, positions, query, key=None, offsets=None, inverse=False):
        self.calls.append({"positions": positions, "query": query, "key": key, "inverse": inverse})
        self.calls[-1]["cache"] = self.cos_sin_cache
        return query * 2, key


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
def test_vllm_gets_a_float32_cos_sin_cache_and_token_major_queries(monkeypatch, case, inverse):
    monkeypatch.setattr(FakeVllmRope, "calls", [])
    fake = types.SimpleNamespace(DeepseekV4ScalingRotaryEmbedding=FakeVllmRope)
    monkeypatch.setattr(vllm_rope, "load_deepseek_scaling_rope", lambda: fake)
    values, angles = inputs(case)
    result = vllm_rope.apply_rope_vllm_dsv4(values, angles, inverse=inverse)
    made, call = FakeVllmRope.calls
    tokens, heads, pairs = (
        values.shape[0] * values.shape[1],
        values.shape[2] if values.dim() == 4 else 1,
        angles.shape[-1],
    )
    assert made["init"] == (values.shape[-1], 2 * pairs, tokens, False, 1.0), f"constructed with {made['init']}"
    assert (made["dtype"], made["mscale"], made["mscale_all_dim"]) == (values.dtype, 0, 0), f"constructed with {made}"
    table = full_angles(values, angles).reshape(tokens, pairs)
    expect_equal(
        "cos_sin_cache (cosines then sines, float32)", call["cache"], torch.cat((table.cos(), table.sin()), -1)
    )
    expect_equal("query ([tokens, heads, head_size])", call["query"], values.reshape(tokens, heads, -1))
    assert call["query"].data_ptr() != values.data_ptr(), "the query is a copy: the CUDA op works in place"
    expect_equal("positions", call["positions"], torch.arange(tokens))
    assert call["key"] is None and call["inverse"] is inverse, f"key {call['key']}, inverse {call['inverse']}"
    expect_equal("result", result, values * 2)


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
def test_flash_attention_gets_the_strided_rotary_block_and_position_tables(monkeypatch, calls, case, inverse):
    def apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, max_seqlen=None, interleaved=False,
                     inplace=False, conjugate=False):  # fmt: skip
        calls.append({"x": x, "cos": cos, "sin": sin, "offsets": seqlen_offsets, "cu_seqlens": cu_seqlens})
        calls[-1].update(interleaved=interleaved, inplace=inplace, conjugate=conjugate)
        return x * 2

    monkeypatch.setattr(flash_rotary, "load_rotary", lambda: types.SimpleNamespace(apply_rotary=apply_rotary))
    values, angles = inputs(case)
    result = flash_rotary.apply_rope_flash_attention(values, angles, inverse=inverse)
    (call,) = calls
    batch, sequence, pairs = values.shape[0], values.shape[1], angles.shape[-1]
    block = values[..., -2 * pairs :]
    expect_equal("x (batch, seqlen, nheads, rotary_dim)", call["x"], block if values.dim() == 4 else block.unsqueeze(2))
    assert call["x"].data_ptr() == block.data_ptr(), "x is a view of the rotary block, strides and all"
    table = full_angles(values, angles)
    if case in SHARED_BY_BATCH:
        table = table[0]
        assert call["offsets"] == 0, f"one table for the batch, read from row 0: offsets {call['offsets']}"
    else:
        table = table.reshape(batch * sequence, pairs)
        expect_equal("seqlen_offsets (sequence b reads rows b*S on)", call["offsets"], torch.arange(batch) * sequence)
    expect_equal("cos (float32, (seqlen_ro, rotary_dim / 2))", call["cos"], table.cos())
    expect_equal("sin", call["sin"], table.sin())
    assert (call["interleaved"], call["conjugate"], call["inplace"]) == (True, inverse, False), f"flags: {call}"
    expect_equal("result (copied channels in front)", result, rotary_doubled(values, pairs))


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
def test_liger_gets_the_rotary_block_no_key_heads_and_complex_freqs(monkeypatch, calls, case, inverse):
    class LigerLlama4RopeFunction:
        @staticmethod
        def apply(q, k, freqs_cis, BLOCK_SIZE=None):  # noqa: N803 (the peer's name)
            calls.append({"q": q, "k": k, "freqs_cis": freqs_cis})
            return q * 2, k

    monkeypatch.setattr(
        liger, "load_llama4_rope", lambda: types.SimpleNamespace(LigerLlama4RopeFunction=LigerLlama4RopeFunction)
    )
    values, angles = inputs(case)
    result = liger.apply_rope_liger_llama4(values, angles, inverse=inverse)
    (call,) = calls
    pairs = angles.shape[-1]
    block = values[..., -2 * pairs :]
    expect_equal("q ([batch, seq, heads, 2P])", call["q"], block if values.dim() == 4 else block.unsqueeze(2))
    assert call["q"].data_ptr() == block.data_ptr(), "q is a view of the rotary block"
    assert call["k"].shape == (*values.shape[:2], 0, 2 * pairs), f"k: received {tuple(call['k'].shape)}, no heads"
    table = full_angles(values, angles)[: 1 if case in SHARED_BY_BATCH else None]
    freqs = torch.polar(torch.ones_like(table), table)
    assert not call["freqs_cis"].is_conj(), "the conjugate is resolved, as the peer's view_as_real needs"
    expect_equal(
        "freqs_cis (complex64, conjugated for the inverse)", call["freqs_cis"], freqs.conj() if inverse else freqs
    )
    expect_equal("result (copied channels in front)", result, rotary_doubled(values, pairs))


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", CASES)
def test_megatron_gets_sequence_first_values_and_pairwise_repeated_angles(monkeypatch, calls, case, inverse):
    def apply_rotary_pos_emb(
        t, freqs, config, cu_seqlens=None, mscale=1.0, cp_group=None, mla_rotary_interleaved=False
    ):
        calls.append({"t": t, "freqs": freqs, "config": config, "cu_seqlens": cu_seqlens, "mscale": mscale})
        calls[-1].update(cp_group=cp_group, mla=mla_rotary_interleaved)
        return t * 2

    config = types.SimpleNamespace(rotary_interleaved=True, apply_rope_fusion=False)
    monkeypatch.setattr(megatron, "interleaved_config", lambda: config)
    monkeypatch.setattr(
        megatron, "load_rope_utils", lambda: types.SimpleNamespace(apply_rotary_pos_emb=apply_rotary_pos_emb)
    )
    values, angles = inputs(case)
    result = megatron.apply_rope_megatron_interleaved(values, angles, inverse=inverse)
    (call,) = calls
    pairs = angles.shape[-1]
    block = values[..., -2 * pairs :]
    expect_equal(
        "t ([seq, batch, heads, 2P])", call["t"], (block if values.dim() == 4 else block.unsqueeze(2)).transpose(0, 1)
    )
    freqs = angles.reshape((1,) * (3 - angles.dim()) + tuple(angles.shape)).repeat_interleave(2, -1)
    freqs = freqs.transpose(0, 1).unsqueeze(2)
    expect_equal(
        "freqs (float32 angles, each twice; negated for the inverse)", call["freqs"], -freqs if inverse else freqs
    )
    assert call["config"] is config and (call["cu_seqlens"], call["mscale"], call["mla"]) == (None, 1.0, False)
    assert (call["cp_group"].size(), call["cp_group"].rank()) == (1, 0), "a one-rank context-parallel group"
    expect_equal("result (copied channels in front)", result, rotary_doubled(values, pairs))


@pytest.mark.parametrize("inverse", [False, True], ids=["forward", "inverse"])
@pytest.mark.parametrize("case", sorted(SHARED_BY_BATCH))
def test_megatron_fused_mla_gets_a_sequence_first_copy_and_one_table(monkeypatch, calls, case, inverse):
    def fused_apply_mla_rope_for_q(t, cos, sin, qk_head_dim, emb_dim, cu_seqlens_q=None, cp_rank=0, cp_size=1,
                                   rotary_interleaved=False):  # fmt: skip
        calls.append({"t": t.clone(), "cos": cos, "sin": sin, "split": (qk_head_dim, emb_dim), "cu": cu_seqlens_q})
        calls[-1]["rest"] = (cp_rank, cp_size, rotary_interleaved)
        return t.mul_(2)

    monkeypatch.setattr(
        megatron,
        "load_fused_mla_rope",
        lambda: types.SimpleNamespace(fused_apply_mla_rope_for_q=fused_apply_mla_rope_for_q),
    )
    values, angles = inputs(case)
    result = megatron.apply_rope_megatron_fused_mla(values, angles, inverse=inverse)
    (call,) = calls
    pairs = angles.shape[-1]
    expect_equal(
        "t (a sequence-first copy)", call["t"], (values if values.dim() == 4 else values.unsqueeze(2)).transpose(0, 1)
    )
    assert call["split"] == (values.shape[-1] - 2 * pairs, 2 * pairs), f"qk_head_dim, emb_dim: {call['split']}"
    doubled = torch.cat((full_angles(values, angles)[0],) * 2, dim=-1)[:, None, None, :]
    assert call["cos"].is_contiguous() and call["sin"].is_contiguous(), "the peer asserts contiguous tables"
    expect_equal("cos ([S, 1, 1, 2P] of cat((angles, angles)), float32)", call["cos"], doubled.cos())
    expect_equal("sin (negated for the inverse)", call["sin"], -doubled.sin() if inverse else doubled.sin())
    assert call["cu"] is None and call["rest"] == (0, 1, False), f"the rest: {call['rest']}"
    expect_equal("result (the peer's in-place work)", result, values * 2)


def test_megatron_fused_mla_refuses_angles_that_differ_across_the_batch(monkeypatch):
    monkeypatch.setattr(megatron, "load_fused_mla_rope", lambda: pytest.fail("the peer must not be called"))
    with pytest.raises(ValueError, match=r"one cos/sin table .* for the whole batch; angles of shape \(2, 3, 4\)"):
        megatron.apply_rope_megatron_fused_mla(*inputs("4d-per-token"))
