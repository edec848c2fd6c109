"""The lines of a standalone reproduction that call a peer as its adapter does (the convention: :mod:`.registry`).

A reproduction is a file of at most 30 lines that imports only torch and the peer and prints what the peer gave
(``got``), what eager PyTorch gives and the truth for one failing element. Its author binds the inputs, pastes
:func:`repro_call`'s lines, and prints. The lines read:

* ``values``: the values of the failing case, ``[B, S, C]`` or ``[B, S, H, C]``, in its dtype, layout and device;
* ``angles``: its angles as three dimensions, ``[1 or B, 1 or S, P]`` (1-D or 2-D angles lifted with leading 1s, as
  the adapters lift them);
* ``inverse``: a bool;

and bind ``got``, the adapter's result bit for bit, besides names of their own (never those three). Compute the
expectation first: a peer that works in place may rotate ``values`` itself (Liger's, for a contiguous rotary block),
as its adapter lets it. Flash-attention's lines read its sdist at ``$DSV41_PEER_WHEELS``, as its adapter does.

Nothing here imports torch or a peer until :func:`repro_call` imports the adapter's module (never the peer).
"""

from __future__ import annotations

import importlib

from dsv41_rope.peers.registry import PEERS

__all__ = ["REPRO_INPUTS", "REPRO_OUTPUT", "REPRO_SUFFIX", "repro_call", "repro_constant"]

REPRO_INPUTS = ("values", "angles", "inverse")
REPRO_OUTPUT = "got"
REPRO_SUFFIX = "_REPRO"
# Adapters that live outside dsv41_rope.peers, and the peers module that holds their lines: the kernel is the product
# (copied out as a package of its own) and carries no reproduction text.
_HOMES = {"dsv41_rope.kernel": "dsv41_rope.peers.compiled"}


def repro_constant(adapter: str) -> tuple[str, str]:
    """The module and the constant that hold ``adapter``'s lines: ``("dsv41_rope.peers.nemo",
    "APPLY_ROPE_NEMO_TRITON_REPRO")`` for ``dsv41_rope.peers.nemo:apply_rope_nemo_triton``."""
    module, _, function = adapter.partition(":")
    return _HOMES.get(module, module), function.upper() + REPRO_SUFFIX


def repro_call(adapter: str) -> str:
    """The lines that call ``adapter``'s peer as the adapter does (see the module), one string ending in a newline.

    Args:
        adapter: ``MODULE:FUNCTION`` of a registry record (``--rope-impl``'s form).

    Raises:
        KeyError: the registry has no such adapter, or its module holds no lines for it; the message names it.
    """
    adapters = [peer.adapter for peer in PEERS]
    if adapter not in adapters:
        raise KeyError(f"no reproduction lines for {adapter!r}: no adapter of the registry ({', '.join(adapters)})")
    module_name, constant = repro_constant(adapter)
    lines = getattr(importlib.import_module(module_name), constant, None)
    if not isinstance(lines, str):
        raise KeyError(f"no reproduction lines for {adapter!r}: {module_name} has no {constant}")
    return lines
