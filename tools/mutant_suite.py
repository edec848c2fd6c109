"""Runs the contract suite on a copy of the checkout whose kernel carries one gating mutation: whether the fixed matrix
and the generated layouts themselves fail it, not only the gating-power test's probes.

    python -m tools.mutant_suite MUTATION [MUTATION ...] [-- PYTEST_ARGS...]

Each mutation (a name of ``dsv41_rope.conformance.mutations.MUTATIONS`` or ``LAYOUT_MUTATIONS``) is applied to its
module of ``dsv41_rope/kernel/`` in a fresh copy of the checkout's files (untracked ones git does not ignore too),
where ``python -m pytest dsv41_rope/conformance --ignore dsv41_rope/conformance/kernel_self_tests`` runs with this
python (the pytest arguments after ``--`` added). Prints one line a mutation: killed (how many tests failed) or
survived. Exit status 0 when every mutation was killed, 1 when one survived, 2 on an unknown mutation.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from dsv41_rope.conformance.mutations import LAYOUT_MUTATIONS, MUTATIONS, TARGETS

__all__ = ["REPO", "main", "mutated_checkout", "run_suite"]

REPO = Path(__file__).resolve().parents[1]
_SUMMARY = re.compile(r"(\d+) failed")


def mutated_checkout(mutation: str, destination: Path) -> Path:
    """A copy of the checkout's files (tracked, and untracked ones git does not ignore) in ``destination``, with
    ``mutation`` applied to its kernel module.

    Raises:
        KeyError: an unknown mutation.
        ValueError: the mutation's text does not occur exactly once in its module.
    """
    original, mutated = {**MUTATIONS, **LAYOUT_MUTATIONS}[mutation]
    listing = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    files = subprocess.run(listing, cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = REPO / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    target = destination / "dsv41_rope" / "kernel" / TARGETS[mutation]
    text = target.read_text()
    if text.count(original) != 1:
        raise ValueError(f"mutation {mutation!r} matches {text.count(original)} times in {TARGETS[mutation]}")
    target.write_text(text.replace(original, mutated))
    return destination


def run_suite(checkout: Path, pytest_args: Sequence[str]) -> tuple[int, str]:
    """Runs the contract suite of ``checkout`` (its own package first on the path); returns pytest's exit status and
    its last line."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "dsv41_rope/conformance"]
    command += ["--ignore", "dsv41_rope/conformance/kernel_self_tests", *pytest_args]
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines[-1] if lines else done.stderr.strip()[-300:]


def main(argv: Sequence[str] | None = None) -> int:
    """Runs each mutation's suite; see the module docstring for the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m tools.mutant_suite", description=__doc__.splitlines()[0])
    parser.add_argument("mutations", nargs="+", metavar="MUTATION")
    args = parser.parse_args(argv)
    unknown = [name for name in args.mutations if name not in MUTATIONS and name not in LAYOUT_MUTATIONS]
    if unknown:
        print(f"mutant_suite: unknown mutations {unknown}", file=sys.stderr)
        return 2
    survived = False
    for mutation in args.mutations:
        with tempfile.TemporaryDirectory() as scratch:
            status, last = run_suite(mutated_checkout(mutation, Path(scratch)), pytest_args)
        failed = _SUMMARY.search(last)
        killed = failed is not None and int(failed[1]) > 0
        survived |= not killed
        print(f"{mutation}: {'killed' if killed else 'SURVIVED'} (exit {status}): {last}", flush=True)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
