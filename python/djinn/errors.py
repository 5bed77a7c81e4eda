# SPDX-License-Identifier: MIT
"""Exceptions: every failed libdjinn call raises a djinn.Error.

An Error carries the negative errno libdjinn returned (as ``errno``, the
positive value, as OSError does) and the daemon's message, or
libdjinn's for what it refused itself (djinn_last_error()). Subclasses
name the kinds a program handles differently; catch Error for all.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Dict, Type


class Error(Exception):
    """A Djinn call failed.

    Attributes:
        errno: the positive errno (``errno.ENOMEM``, ...).
        message: why, in the daemon's words where it said.
        call: the libdjinn function that failed.
    """

    def __init__(self, err: int, message: str = "", call: str = "") -> None:
        self.errno = err
        self.message = message or os.strerror(err)
        self.call = call
        name = _errno.errorcode.get(err, str(err))
        where = f"{call}: " if call else ""
        super().__init__(f"{where}{self.message} ({name})")


class OutOfMemory(Error):
    """ENOMEM: the device (or host) has no room for it."""


class QuotaExceeded(Error):
    """EDQUOT: over the tenant's or session's quota."""


class NotFound(Error, LookupError):
    """ENOENT: no such model, session, tensor or result (a LookupError
    too)."""


class InvalidArgument(Error, ValueError):
    """EINVAL: a bad argument: shape, dtype, token, name, ... (a
    ValueError too)."""


class Busy(Error):
    """EBUSY: in use (a held model, a context mid-step or paused)."""


class PermissionDenied(Error):
    """EPERM, EACCES: refused for who the caller is."""


class NotSupported(Error):
    """EOPNOTSUPP: the daemon does not do that (no models, no kernels)."""


class NoSpace(Error):
    """ENOSPC: a context's cache would pass its max_tokens."""


class Timeout(Error):
    """ETIMEDOUT: a wait ran out."""


class ConnectionLost(Error):
    """ECONNRESET, EPROTO, ESHUTDOWN, EPIPE, ENOTCONN: the daemon went
    away (ENOTCONN: and did not come back while libdjinn tried)."""


class Retry(Error):
    """ECONNABORTED: the connection to djinnd dropped while the call ran
    (a restart); libdjinn reconnects and attaches the sessions, and the
    call may be made again."""


class ProtocolMismatch(Error):
    """EPROTONOSUPPORT: the daemon speaks another protocol version."""


_KINDS: Dict[int, Type[Error]] = {
    _errno.ENOMEM: OutOfMemory,
    _errno.EDQUOT: QuotaExceeded,
    _errno.ENOENT: NotFound,
    _errno.EINVAL: InvalidArgument,
    _errno.E2BIG: InvalidArgument,
    _errno.EBUSY: Busy,
    _errno.EPERM: PermissionDenied,
    _errno.EACCES: PermissionDenied,
    _errno.EOPNOTSUPP: NotSupported,
    _errno.ENOSPC: NoSpace,
    _errno.ETIMEDOUT: Timeout,
    _errno.ECONNRESET: ConnectionLost,
    _errno.EPROTO: ConnectionLost,
    _errno.ESHUTDOWN: ConnectionLost,
    _errno.EPIPE: ConnectionLost,
    _errno.ENOTCONN: ConnectionLost,
    _errno.EPROTONOSUPPORT: ProtocolMismatch,
    _errno.ECONNABORTED: Retry,
}


class Closed(Error):
    """A call on a session, model, context, tensor or connection that was
    closed or freed (EBADF): nothing was sent."""


_KINDS[_errno.EBADF] = Closed


def error(err: int, message: str = "", call: str = "") -> Error:
    """The Error for errno @err (positive or negative)."""
    err = abs(err)
    return _KINDS.get(err, Error)(err, message, call)


def closed(what: str) -> Closed:
    """The Error for a call on @what after it was closed."""
    return Closed(_errno.EBADF, f"{what} is closed", "")
