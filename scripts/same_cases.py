"""Whether a run split into shards and merged holds the same cases, with the same numbers, as the suite run unsplit,
the device each case ran on aside (the ``shards`` and ``two_gpus`` steps of ``scripts/h200_session.sh``).

    python3 -m scripts.same_cases UNSPLIT_JSON MERGED_JSON [--label TEXT]

Prints one line of counts, then up to five differing cases; exits 1 when a report is missing, else 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

SHOWN = 5


def without_device(case: dict) -> dict:
    """A case's record without the device that ran it (shards on other GPUs name other devices)."""
    return {key: value for key, value in case.items() if key != "device"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("unsplit", type=Path)
    parser.add_argument("merged", type=Path)
    parser.add_argument("--label", default="unsplit comparison")
    args = parser.parse_args(argv)
    for path in (args.merged, args.unsplit):
        if not path.exists():
            print(f"{args.label}: no {path} (run the unsplit suite first)")
            return 1
    whole, merged = (json.loads(path.read_text())["cases"] for path in (args.unsplit, args.merged))
    differ = sorted(k for k in merged.keys() & whole.keys() if without_device(merged[k]) != without_device(whole[k]))
    print(
        f"{args.label}: {len(whole)} cases unsplit, {len(merged)} merged; {len(whole.keys() - merged.keys())} only"
        f" unsplit, {len(merged.keys() - whole.keys())} only merged, {len(differ)} differ (device aside)"
    )
    print("".join(f"  differs: {key}\n" for key in differ[:SHOWN]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
