"""``python -m xr_zstrings.cli``: the ``zstrings`` command."""

import sys

from .main import main

sys.exit(main())
