# SPDX-License-Identifier: MIT
"""Errors as the OpenAI API gives them: a status code and
{"error": {"message", "type", "param", "code"}}, which the openai SDK
raises as BadRequestError (400), AuthenticationError (401),
NotFoundError (404), RateLimitError (429), InternalServerError (5xx)."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .. import errors as djerr

_TYPES = {400: "invalid_request_error", 401: "invalid_request_error",
          403: "permission_denied", 404: "invalid_request_error",
          413: "invalid_request_error", 429: "insufficient_quota",
          500: "server_error", 503: "server_error"}


class ApiError(Exception):
    """A request answered with @status and @message; @param names the
    field at fault."""

    def __init__(self, status: int, message: str,
                 param: Optional[str] = None, code: Optional[str] = None,
                 type: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or _TYPES.get(status, "server_error")

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type,
                          "param": self.param, "code": self.code}}


def from_djinn(e: djerr.Error) -> ApiError:
    """What a client of the endpoint is told of an error djinnd gave."""
    msg = f"djinnd: {e.message}"
    if isinstance(e, (djerr.InvalidArgument,)):
        return ApiError(400, msg, code="invalid_value")
    if isinstance(e, djerr.NotFound):
        return ApiError(404, msg, code="not_found")
    if isinstance(e, djerr.QuotaExceeded):
        return ApiError(429, msg, code="quota_exceeded")
    if isinstance(e, djerr.PermissionDenied):
        return ApiError(403, msg, code="permission_denied")
    if isinstance(e, (djerr.OutOfMemory, djerr.NoSpace, djerr.Busy,
                      djerr.Retry, djerr.Timeout, djerr.ConnectionLost,
                      djerr.Closed)):
        return ApiError(503, msg + " (try again)", code="overloaded")
    return ApiError(500, msg, code="internal_error")
