"""The peers the suite can judge: one record per adapter, with the ``MODULE:FUNCTION`` that ``--rope-impl`` takes.

Nothing here imports torch or a peer: the records are data, read by ``python -m dsv41_rope.peers`` and the tests.

Reproductions: beside each adapter function ``apply_rope_x``, its module holds ``APPLY_ROPE_X_REPRO`` (the function's
name in upper case, then ``_REPRO``): the few lines of Python that call the peer exactly as the adapter does, for a
standalone bug report. They import only torch, the standard library and the peer (never this project), read the
variables ``values``, ``angles`` (three-dimensional) and ``inverse``, and bind ``got``, the adapter's result bit for
bit. The reference's own adapter (``dsv41_rope.kernel:apply_rope_eager``; the kernel carries no peer's text) has its
lines in :mod:`dsv41_rope.peers.compiled`. :func:`dsv41_rope.peers.repro_calls.repro_call` returns an adapter's lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["KINDS", "LOADED_BY", "PEERS", "Peer", "by_name"]

# pytorch: eager torch ops (autograd gives the backward); triton: a Triton kernel of the peer's; compile:
# torch.compile's code; cuda: a compiled CUDA extension of the peer's.
Kind = Literal["pytorch", "triton", "compile", "cuda"]
KINDS: tuple[Kind, ...] = ("pytorch", "triton", "compile", "cuda")
LOADED_BY = {
    "project": "this project's own code",
    "installed": "an import of the installed distribution (its whole import chain runs)",
    "path-installed": "its one module file, by path from the installed distribution (the packages above not run)",
    "path-sdist": "its one module file, read out of the source archive in $DSV41_PEER_WHEELS (nothing built)",
}


@dataclass(frozen=True)
class Peer:
    """One adapted peer.

    Attributes:
        name: a short name.
        distribution: the PyPI distribution, None for this project's own code.
        version: the pinned version, None for this project's own code.
        adapter: ``MODULE:FUNCTION`` of the adapter, as ``--rope-impl`` takes it.
        peer_function: the file inside the distribution and the function adapted, with its signature.
        kind: what runs (:data:`KINDS`).
        loaded: how the adapter reaches the peer (a key of :data:`LOADED_BY`).
        backward: whether the peer has a backward (the adapter is then differentiable w.r.t. values).
        needs: other distributions the peer's import chain needs, installed beside it.
        unavailable: why the peer cannot run on the GPU runner (one line), None where it can.
        notes: what a judge should know before reading its results.
        writes_past_the_tensor: it writes memory outside its tensors (a CUDA context it corrupts fails every later
            call of the process, so a process that runs several peers runs it last).
    """

    name: str
    distribution: str | None
    version: str | None
    adapter: str
    peer_function: str
    kind: Kind
    loaded: str
    backward: bool
    needs: tuple[str, ...] = ()
    unavailable: str | None = None
    notes: str = ""
    writes_past_the_tensor: bool = False

    @property
    def pin(self) -> str | None:
        """``distribution==version``, None for this project's own code."""
        return f"{self.distribution}=={self.version}" if self.distribution else None

    @property
    def adapter_module(self) -> str:
        """The adapter's module."""
        return self.adapter.partition(":")[0]

    @property
    def adapter_function(self) -> str:
        """The adapter's function name."""
        return self.adapter.partition(":")[2]


_NEMO = ("nemo-automodel", "0.7.0")
_SGLANG = ("sglang", "0.5.23")
_SGLANG_ROPE = "sglang/kernels/ops/attention/dsv4/rope.py: apply_rotary_emb_triton(x, freqs_cis, positions=None, "
_SGLANG_NOTES = (
    "In place on the adapter's copy; freqs_cis complex64 by torch.polar (precompute_freqs_cis), positions int64. "
    "On CUDA the DSV4 model runs a JIT CUDA kernel (fused_rope_inplace), these Triton kernels on ROCm and XPU."
)
_MEGATRON = ("megatron-core", "0.19.2")

PEERS: tuple[Peer, ...] = (
    Peer(
        "nemo-rope-triton",
        *_NEMO,
        "dsv41_rope.peers.nemo:apply_rope_nemo_triton",
        "nemo_automodel/components/models/common/rope_triton.py: apply_rope_triton(values, angles, *, inverse=False)",
        "triton",
        "installed",
        backward=True,
        needs=("transformers",),
        notes="The contract's own signature. Angles expanded to [B, S, P]: it rejects broadcast angles. Frequencies "
        "by its torch.polar (float32). Off CUDA it runs its eager fallback. Its import chain runs "
        "components/models/common/__init__, which imports transformers.",
    ),
    Peer(
        "nemo-dsv4-eager",
        *_NEMO,
        "dsv41_rope.peers.nemo:apply_rope_nemo_dsv4",
        "nemo_automodel/components/models/deepseek_v4/layers.py: _apply_partial_rope_interleaved(x, cos, sin, "
        "rope_head_dim)",
        "pytorch",
        "installed",
        backward=True,
        needs=("transformers",),
        notes="Interleaved pairs. cos/sin of cat((angles, angles)) by .cos()/.sin() in float32, cast to the values' "
        "dtype (BF16 tables for BF16 values), as DeepseekV4RotaryEmbedding feeds them; inverse by (cos, -sin). "
        "Values transposed to [B, H, S, D] as the model's queries.",
    ),
    Peer(
        "hf-transformers-dsv4",
        "transformers",
        "5.17.0",
        "dsv41_rope.peers.huggingface:apply_rope_hf_dsv4",
        "transformers/models/deepseek_v4/modeling_deepseek_v4.py: apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)",
        "pytorch",
        "installed",
        backward=True,
        notes="DeepSeek V4 first ships in 5.8.0, with the same rotary text as 5.17.0. Interleaved pairs "
        "(repeat_interleave(2) and an interleaved rotate_half). Half-width cos/sin by .cos()/.sin() in float32 cast "
        "to the values' dtype; inverse by (cos, -sin). Values transposed to [B, H, S, D].",
    ),
    Peer(
        "sglang-dsv4-per-token",
        *_SGLANG,
        "dsv41_rope.peers.sglang_rope:apply_rope_sglang_per_token",
        _SGLANG_ROPE + "inverse=False) -> apply_rotary_emb_triton_kernel (set_batched_rope(False), the default)",
        "triton",
        "path-installed",
        backward=False,
        notes=_SGLANG_NOTES,
    ),
    Peer(
        "sglang-dsv4-batched",
        *_SGLANG,
        "dsv41_rope.peers.sglang_rope:apply_rope_sglang_batched",
        _SGLANG_ROPE + "inverse=False) -> apply_rotary_emb_triton_kernel_batched (set_batched_rope(True), 2-D x)",
        "triton",
        "path-installed",
        backward=False,
        notes=_SGLANG_NOTES + " The rotary slice goes in as [tokens * heads, rope_dim] rows.",
    ),
    Peer(
        "sglang-dsv4-flat",
        *_SGLANG,
        "dsv41_rope.peers.sglang_rope:apply_rope_sglang_flat",
        _SGLANG_ROPE + "inverse=False) -> apply_rotary_emb_flat_kernel (set_batched_rope(True), 3-D x)",
        "triton",
        "path-installed",
        backward=False,
        notes=_SGLANG_NOTES + " For a rotary width that is not a power of two it overwrites the next row's leading "
        "channels (sglang#35096); the last row's tile runs past the tensor and the table (into the adapter's spare "
        "tails). With zero pairs it loads through the empty slice's null pointer: the process (or CUDA context) dies.",
        writes_past_the_tensor=True,
    ),
    Peer(
        "vllm-dsv4",
        "vllm",
        "0.33.0",
        "dsv41_rope.peers.vllm_rope:apply_rope_vllm_dsv4",
        "vllm/model_executor/layers/rotary_embedding/deepseek_scaling_rope.py: DeepseekV4ScalingRotaryEmbedding"
        ".forward(positions, query, key=None, offsets=None, inverse=False)",
        "cuda",
        "installed",
        backward=False,
        unavailable="its module imports vllm.platforms and a CustomOp base (vllm.config), so it needs all of vllm and "
        "its dependencies, and the CUDA op lives in the 336 MB wheel (torch==2.14.0): over the 64 MiB carry",
        notes="Interleaved (GPT-J) pairs on the last rotary_dim channels; float32 cos_sin_cache [positions, 2P] "
        "(cosines, then sines); inverse= negates sin. forward_cuda is torch.ops._C.rotary_embedding, in place; "
        "forward_hip drops inverse. The DSV4 model uses only the cache, in fused quantize/cache kernels.",
    ),
    Peer(
        "flash-attn-rotary",
        "flash-attn",
        "2.8.3.post2",
        "dsv41_rope.peers.flash_rotary:apply_rope_flash_attention",
        "flash_attn/ops/triton/rotary.py: apply_rotary(x, cos, sin, seqlen_offsets=0, cu_seqlens=None, "
        "max_seqlen=None, interleaved=False, inplace=False, conjugate=False)",
        "triton",
        "path-sdist",
        backward=False,
        notes="Rotates the FIRST rotary_dim channels of x (batch, seqlen, nheads, headdim), any strides, headdim <= "
        "256; cos/sin (seqlen_ro, rotary_dim / 2) float32 by .cos()/.sin(), one table for the batch (per-sequence "
        "angles through seqlen_offsets); conjugate=. It enters torch.cuda.device(x.device.index), which fails for "
        "CPU tensors.",
    ),
    Peer(
        "liger-llama4-rope",
        "liger-kernel",
        "0.8.5",
        "dsv41_rope.peers.liger:apply_rope_liger_llama4",
        "liger_kernel/ops/llama4_rope.py: LigerLlama4RopeFunction.apply(q, k, freqs_cis, BLOCK_SIZE=None)",
        "triton",
        "installed",
        backward=True,
        notes="Interleaved pairs, complex64 freqs_cis by torch.polar; inverse by freqs_cis.conj() (no flag). One "
        "table for the batch (it takes the first S rows). Rotates q.contiguous() in place: a contiguous rotary block "
        "(channels == 2P) is the caller's values, and its backward rotates the incoming gradient in place alike.",
    ),
    Peer(
        "megatron-interleaved",
        *_MEGATRON,
        "dsv41_rope.peers.megatron:apply_rope_megatron_interleaved",
        "megatron/core/models/common/embeddings/rope_utils.py: apply_rotary_pos_emb(t, freqs, config, "
        "cu_seqlens=None, mscale=1.0, cp_group=None, mla_rotary_interleaved=False)",
        "pytorch",
        "installed",
        backward=True,
        notes="config.rotary_interleaved=True, apply_rope_fusion=False. Rotates the FIRST freqs.shape[-1] channels "
        "of sequence-first t; freqs are float32 angles repeated pairwise, cos/sin taken inside and cast to t's dtype; "
        "inverse by negated angles (no flag).",
    ),
    Peer(
        "megatron-fused-mla",
        *_MEGATRON,
        "dsv41_rope.peers.megatron:apply_rope_megatron_fused_mla",
        "megatron/core/fusions/fused_mla_yarn_rope_apply.py: fused_apply_mla_rope_for_q(t, cos, sin, qk_head_dim, "
        "emb_dim, cu_seqlens_q=None, cp_rank=0, cp_size=1, rotary_interleaved=False)",
        "triton",
        "installed",
        backward=True,
        notes="In place on a sequence-first copy. Reads adjacent pairs, writes real parts then imaginary parts (MLA's "
        "de-interleaved layout). One float32 cos/sin table [S, 1, 1, 2P] for the batch (per-sequence angles raise); "
        "inverse by -sin. Needs emb_dim // 2 a power of two; autotuned (the interpreter cannot benchmark).",
    ),
    Peer(
        "torch-compile-fullgraph",
        None,
        None,
        "dsv41_rope.peers.compiled:apply_rope_compiled_fullgraph",
        "dsv41_rope/kernel/eager_path.py: torch.compile(apply_rope_eager, fullgraph=True)",
        "compile",
        "project",
        backward=True,
        notes="Raises torch._dynamo.exc.Unsupported on every call: apply_rope_eager's storage_offset() guard is no "
        "graph op.",
    ),
    Peer(
        "torch-compile",
        None,
        None,
        "dsv41_rope.peers.compiled:apply_rope_compiled",
        "dsv41_rope/kernel/eager_path.py: torch.compile(apply_rope_eager)",
        "compile",
        "project",
        backward=True,
        notes="One graph break, at the storage_offset() guard. Recompile limit lifted.",
    ),
    Peer(
        "eager-control",
        None,
        None,
        "dsv41_rope.kernel:apply_rope_eager",
        "dsv41_rope/kernel/eager_path.py: apply_rope_eager(values, angles, *, inverse=False)",
        "pytorch",
        "project",
        backward=True,
        notes="The reference itself: on a GPU it must pass everything (on a CPU the oracle still emulates CUDA's "
        "eager bits, which CPU eager does not always give).",
    ),
)


def by_name(name: str) -> Peer:
    """The record named ``name``.

    Raises:
        KeyError: no such peer; the message lists the names.
    """
    for peer in PEERS:
        if peer.name == name:
            return peer
    raise KeyError(f"no peer {name!r}; peers: {', '.join(peer.name for peer in PEERS)}")
