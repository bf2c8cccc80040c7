"""``python -m mploader``: the same as the ``mploader`` command."""

import sys

from .cli import main

sys.exit(main())
