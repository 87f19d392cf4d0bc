"""API errors in each provider's shape and status code, so SDKs raise their usual exception classes."""
from __future__ import annotations

import secrets
from typing import Any

from starlette.responses import JSONResponse

_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 529: "overloaded_error"}
_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
                 405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
                 500: "server_error", 503: "server_error"}


_GEMINI_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  405: "INVALID_ARGUMENT", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                  503: "UNAVAILABLE"}


class ApiError(Exception):
    """An error answered to the client (never a crash of the server)."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def anthropic_body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(self.status, "api_error"),
                                           "message": self.message}}

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": _OPENAI_TYPES.get(self.status, "server_error"),
                          "param": self.param, "code": self.code}}

    def gemini_body(self) -> dict[str, Any]:
        return {"error": {"code": self.status, "message": self.message,
                          "status": _GEMINI_STATUS.get(self.status, "INTERNAL")}}

    def response(self, api: str, request_id: str | None = None) -> JSONResponse:
        request_id = request_id or f"req_{secrets.token_hex(12)}"
        if api == "gemini":
            body = self.gemini_body()
        else:
            body = self.anthropic_body() if api == "anthropic" else self.openai_body()
        if api == "anthropic":  # the Messages API's error shape carries the request id beside the error
            body["request_id"] = request_id
        headers = {"request-id": request_id, "x-request-id": request_id}
        if self.status >= 500:  # a failure here (a full disk): the SDKs' retries would only repeat it
            headers["x-should-retry"] = "false"
        return JSONResponse(body, status_code=self.status, headers=headers)


def invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param)
