"""Adapters that put the DeepSeek V4 rotary embeddings the field runs behind the suite's contract,
``fn(values, angles, *, inverse=False) -> tensor``, so that ``--rope-impl MODULE:FUNCTION`` judges each of them.

Each adapter is the few lines a careful user of that peer writes: it slices the last ``2P`` channels, builds the
tables the peer takes, in the dtype the peer's own DeepSeek V4 model code feeds it (float32 where it has none),
broadcasts the angles as the peer requires, conjugates by the peer's own mechanism, and puts the copied channels
back. It never repairs what the peer returns. The peers are imported when an adapter is first called, never when
this package is: :mod:`.registry` lists them (``python -m dsv41_rope.peers``), :mod:`.loading` reaches them.

Modules: :mod:`.nemo` (NeMo Automodel), :mod:`.huggingface` (transformers), :mod:`.sglang_rope`, :mod:`.vllm_rope`,
:mod:`.flash_rotary` (flash-attention), :mod:`.liger` (Liger-Kernel), :mod:`.megatron` (Megatron-core),
:mod:`.compiled` (``torch.compile`` of the eager reference); :mod:`.broadcast` holds the steps they share.
:func:`repro_call` returns the lines that call an adapter's peer as the adapter does, for a standalone reproduction.
"""

from __future__ import annotations

from dsv41_rope.peers.registry import PEERS, Peer, by_name
from dsv41_rope.peers.repro_calls import repro_call

__all__ = ["PEERS", "Peer", "by_name", "repro_call"]
