# SPDX-License-Identifier: MIT
"""djinn: Djinn for Python, on libdjinn.

    import djinn

    with djinn.connect() as conn, conn.session() as s:
        m = s.model("tiny-gpt2")
        ctx = m.context()
        ctx.prefill([3, 141, 59])
        print(ctx.generate(8))

Connections, sessions (with tool calls for agents), tensors, graphs of
ops with lazy results, models with contexts, breakpoints and steering,
and Hugging Face-style ghost models (djinn.AutoModelForCausalLM) whose
weights never leave the daemon. Documentation/python.rst says it all.
"""

from ._core import (
    Connection,
    ConnStats,
    NodeStatus,
    Request,
    Result,
    ServerInfo,
    Session,
    StatusModel,
    Tensor,
    connect,
)
from . import ops
from .errors import (
    Busy,
    Closed,
    ConnectionLost,
    Error,
    InvalidArgument,
    NoSpace,
    NotFound,
    NotSupported,
    OutOfMemory,
    PermissionDenied,
    ProtocolMismatch,
    QuotaExceeded,
    Retry,
    Timeout,
)
from ._lib import LibraryError
from .graph import Graph, Value
from .model import Context, Model, ModelInfo, Pause, Steps
from . import hf
from .hf import (
    AutoModelForCausalLM,
    AutoTokenizer,
    intercept_huggingface,
    restore_huggingface,
)

__version__ = "0.1.0"

__all__ = [
    "AutoModelForCausalLM",
    "AutoTokenizer",
    "Busy",
    "Closed",
    "ConnStats",
    "Connection",
    "ConnectionLost",
    "Context",
    "Error",
    "Graph",
    "InvalidArgument",
    "LibraryError",
    "Model",
    "ModelInfo",
    "NoSpace",
    "NotFound",
    "NotSupported",
    "OutOfMemory",
    "Pause",
    "PermissionDenied",
    "ProtocolMismatch",
    "QuotaExceeded",
    "Request",
    "Result",
    "Retry",
    "NodeStatus",
    "ServerInfo",
    "StatusModel",
    "Session",
    "Steps",
    "Tensor",
    "Timeout",
    "Value",
    "connect",
    "hf",
    "intercept_huggingface",
    "ops",
    "restore_huggingface",
]
