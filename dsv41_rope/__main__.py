"""``python -m dsv41_rope``: the ``dsv41-rope`` command (:mod:`dsv41_rope.cli`)."""

import sys

from dsv41_rope.cli import main

sys.exit(main())
