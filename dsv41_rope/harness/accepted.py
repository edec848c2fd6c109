"""The accepted baselines, one a backend: ``dsv41_rope/baselines/``, in a checkout and in an installed suite alike.

Usage:
    python -m dsv41_rope.harness.accepted [interpreter|cuda]

prints the path of the backend's accepted ``ulp-drift.json`` (without an argument: the backend a session would run
here, ``dsv41_rope.harness.backend``), for ``--ulp-baseline "$(python -m dsv41_rope.harness.accepted)"``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["BACKENDS", "baseline_path", "main"]

BACKENDS = ("interpreter", "cuda")
_FOLDERS = (Path(__file__).resolve().parents[1] / "baselines",)


def baseline_path(backend: str) -> Path:
    """Returns the accepted baseline of ``backend`` ("interpreter" or "cuda").

    Raises:
        ValueError: on another backend.
        FileNotFoundError: when neither an installed suite nor a checkout holds it.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    name = f"ulp-drift-{backend}.json"
    for folder in _FOLDERS:
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"no accepted baseline {name} in {' or '.join(str(folder) for folder in _FOLDERS)}")


def main(argv: Sequence[str] | None = None) -> int:
    """Prints the path; returns 0, or 2 when there is no such baseline."""
    parser = argparse.ArgumentParser(prog="python -m dsv41_rope.harness.accepted", description=__doc__.splitlines()[0])
    parser.add_argument("backend", nargs="?", choices=BACKENDS, help="default: this machine's (cuda with a GPU)")
    args = parser.parse_args(argv)
    backend = args.backend
    if backend is None:
        from dsv41_rope.harness import backend as session_backend

        session_backend.choose()
        backend = session_backend.name()
    try:
        print(baseline_path(backend))
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
