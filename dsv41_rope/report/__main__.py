"""``python -m dsv41_rope.report``: merges the ulp-drift reports of several shards (`dsv41_rope.report.merge_cli`).

Exit status: 0 merged, complete and not worse than the baseline; 1 a regression; 10 unreadable or conflicting
inputs; 11 incomplete; 12 inconsistent shards; 2 a usage error (``merge_cli.EXIT_*``, ``--help``).
"""

import sys

from dsv41_rope.report.merge_cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
