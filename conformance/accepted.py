"""The accepted baselines, one a backend: where they are, in a checkout (``baselines/``) or in an installed suite
(``conformance/baselines/``, where the distribution ships them).

Usage:
    python -m conformance.accepted [interpreter|cuda]

prints the path of the backend's accepted ``ulp-drift.json`` (without an argument: the backend a session would run
here, ``conformance.backend``), for ``--ulp-baseline "$(python -m conformance.accepted)"``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

BACKENDS = ("interpreter", "cuda")
_HERE = Path(__file__).resolve().parent
# Installed: shipped inside the package. A checkout (editable or not): the repository's own folder.
_FOLDERS = (_HERE / "baselines", _HERE.parent / "baselines")


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
    parser = argparse.ArgumentParser(prog="python -m conformance.accepted", description=__doc__.splitlines()[0])
    parser.add_argument("backend", nargs="?", choices=BACKENDS, help="default: this machine's (cuda with a GPU)")
    args = parser.parse_args(argv)
    backend = args.backend
    if backend is None:
        from conformance import backend as session_backend

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
