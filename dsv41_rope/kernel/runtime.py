"""Whether Triton is here, and whether it compiles for a GPU or interprets on the CPU."""

from __future__ import annotations

import os

try:
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    HAVE_TRITON: bool = True
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = tl = libdevice = None
    HAVE_TRITON = False

# Triton reads TRITON_INTERPRET when a kernel is defined; this is the same truth test it applies.
INTERPRETED: bool = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on", "y")

__all__ = ["HAVE_TRITON", "INTERPRETED", "libdevice", "tl", "triton"]
