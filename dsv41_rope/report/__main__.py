"""``python -m dsv41_rope.report``: merges the ulp-drift reports of several shards (`dsv41_rope.report.merge_cli`)."""

import sys

from dsv41_rope.report.merge_cli import main

__all__ = []

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
