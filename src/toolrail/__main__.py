"""``python -m toolrail`` runs the ``toolrail`` command."""

import sys

from ._cli import main

sys.exit(main())
