"""``python -m dsv41_rope.matrix`` (also ``dsv41-rope matrix``): see :mod:`dsv41_rope.matrix.command`."""

import sys

from dsv41_rope.matrix.command import main

sys.exit(main())
