"""The simulator's error answers: OpenAI-shaped, as vLLM's."""

from __future__ import annotations

from aiohttp import web

_ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}


class RequestRejected(Exception):
    """The request is answered with an OpenAI-shaped error instead of a generation."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    def response(self) -> web.Response:
        return error_response(self.status, self.message, self.param)


def error_response(status: int, message: str, param: str | None = None) -> web.Response:
    kind = _ERROR_TYPES.get(status, "ServiceUnavailableError" if status == 503 else "APIError")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    return web.json_response(body, status=status)


def bad(message: str, param: str | None = None) -> RequestRejected:
    """A 400 for a body that misses or mistypes a field."""
    return RequestRejected(400, message, param)
