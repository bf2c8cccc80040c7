"""``python -m mploader``: the same as the ``mploader`` command."""

import sys

from mploader.cli.main import main

sys.exit(main())
