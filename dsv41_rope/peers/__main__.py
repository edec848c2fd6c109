"""``python -m dsv41_rope.peers``: the registry as a table; ``--adapters`` prints the ``MODULE:FUNCTION`` of each
peer that can run (one a line, for ``dsv41-rope certify``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dsv41_rope.peers.registry import PEERS

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the registry; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m dsv41_rope.peers", description=__doc__)
    parser.add_argument("--adapters", action="store_true", help="only the adapters of the peers that can run")
    args = parser.parse_args(argv)
    if args.adapters:
        print("\n".join(peer.adapter for peer in PEERS if peer.unavailable is None))
        return 0
    for peer in PEERS:
        backward = "backward" if peer.backward else "no backward"
        print(f"{peer.name}: {peer.pin or 'this project'}, {peer.kind}, {peer.loaded}, {backward}")
        print(f"    --rope-impl {peer.adapter}")
        print(f"    adapts {peer.peer_function}")
        if peer.unavailable:
            print(f"    unavailable: {peer.unavailable}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
