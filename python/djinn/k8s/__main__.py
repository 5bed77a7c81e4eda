# SPDX-License-Identifier: MIT
"""python -m djinn.k8s: djinn-device-plugin."""

import sys

from .deviceplugin import main

sys.exit(main())
