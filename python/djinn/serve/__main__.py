# SPDX-License-Identifier: MIT
"""python -m djinn.serve: djinn-serve."""

import sys

from . import main

sys.exit(main())
