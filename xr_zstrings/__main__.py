"""``python -m xr_zstrings``: the same as the ``zstrings`` command."""

import sys

from .cli import main

sys.exit(main())
