"""A wheel cut down to its metadata and the few files an adapter loads, for a wheel too large to carry whole.

    python -m tools.slim_wheel SOURCE_WHEEL DEST_WHEEL MEMBER [MEMBER ...]

Writes ``DEST_WHEEL`` with the ``*.dist-info`` metadata of ``SOURCE_WHEEL`` (``METADATA``, ``WHEEL``, licenses;
not ``entry_points.txt``, whose commands would name modules left out) and the listed members, byte for byte and
with their dates, and a ``RECORD`` rewritten for exactly those files (SHA-256, size), so ``pip install`` installs
it as the same distribution and version. tools/fetch_peer_wheels.sh cuts SGLang's 39 MB wheel to the one module the
adapters load by path.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main", "record_line", "slim"]

# Metadata a slim wheel leaves out: its own RECORD is rewritten, and console scripts would name missing modules.
DROPPED_METADATA = ("RECORD", "entry_points.txt")


def record_line(name: str, data: bytes) -> str:
    """The ``RECORD`` line of one file: ``name,sha256=<urlsafe base64, unpadded>,size``."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim(source: Path, destination: Path, members: Sequence[str]) -> list[str]:
    """Writes the slim wheel; returns the names it holds, ``RECORD`` last.

    Raises:
        KeyError: a member is not in the source wheel.
        ValueError: the source has no ``*.dist-info/RECORD``.
    """
    with zipfile.ZipFile(source) as wheel:
        names = wheel.namelist()
        records = [name for name in names if name.endswith(".dist-info/RECORD") and name.count("/") == 1]
        if not records:
            raise ValueError(f"{source} has no *.dist-info/RECORD: not a wheel")
        dist_info = records[0].rpartition("/")[0] + "/"
        missing = sorted(set(members) - set(names))
        if missing:
            raise KeyError(f"{source} has no {', '.join(missing)}")
        metadata = [
            name
            for name in names
            if name.startswith(dist_info) and not name.endswith("/") and name[len(dist_info) :] not in DROPPED_METADATA
        ]
        kept = [*members, *metadata]
        lines = []
        with zipfile.ZipFile(destination, "w", zipfile.ZIP_DEFLATED) as slimmed:
            for name in kept:
                data = wheel.read(name)
                slimmed.writestr(wheel.getinfo(name), data, zipfile.ZIP_DEFLATED)
                lines.append(record_line(name, data))
            lines.append(f"{records[0]},,")
            slimmed.writestr(wheel.getinfo(records[0]), "\n".join(lines) + "\n", zipfile.ZIP_DEFLATED)
    return [*kept, records[0]]


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the slim wheel and prints its members; returns 0."""
    parser = argparse.ArgumentParser(prog="python -m tools.slim_wheel", description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("destination", type=Path)
    parser.add_argument("members", nargs="+")
    args = parser.parse_args(argv)
    for name in slim(args.source, args.destination, args.members):
        print(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
