# SPDX-License-Identifier: MIT
"""djinn on Kubernetes: the kubelet device plugin that gives pods
djinnd sessions (deviceplugin.py, ``djinn-device-plugin``). Needs grpcio
and grpcio-tools (pip install grpcio grpcio-tools)."""
