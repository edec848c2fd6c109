"""The steps every adapter shares: the rotary width, the contract's angles as the peers' three-dimensional tables, and
the copied channels put back in front of a peer's rotated block."""

from __future__ import annotations

import torch

__all__ = ["angles_as_3d", "angles_per_token", "join_copied_channels", "rotary_width"]


def rotary_width(angles: torch.Tensor) -> int:
    """The channels rotated: ``2 * P`` for angles of ``P`` pairs."""
    return 2 * angles.shape[-1]


def angles_as_3d(angles: torch.Tensor) -> torch.Tensor:
    """The contract's angles (``[B or 1, S or 1, P]``; for 3-D values also ``[S or 1, P]`` or ``[P]``) as a view of
    shape ``[B or 1, S or 1, P]``: leading dimensions of 1 added, nothing copied."""
    return angles[(None,) * (3 - angles.dim())] if angles.dim() < 3 else angles


def angles_per_token(values: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """The angles expanded (a view, nothing copied) to ``[B, S, P]``, one row per token of ``values``, for peers that
    take no broadcast."""
    return angles_as_3d(angles).expand(values.shape[0], values.shape[1], -1)


def join_copied_channels(values: torch.Tensor, rotated: torch.Tensor) -> torch.Tensor:
    """``values``' leading (copied) channels followed by the peer's ``rotated`` block of the last channels, as the
    eager ``torch.cat`` of Automodel's fallback writes it."""
    return torch.cat((values[..., : values.shape[-1] - rotated.shape[-1]], rotated), dim=-1)
