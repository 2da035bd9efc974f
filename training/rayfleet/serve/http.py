"""The HTTP surface shared by every endpoint: the key check, OpenAI-style errors, request parsing.

Errors have OpenAI's shape, `{"error": {"message", "type", "code"}}`, so OpenAI clients show the message;
a bad request never takes the replica down.
"""

from __future__ import annotations

import json
from typing import TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.middleware.base import BaseHTTPMiddleware

from rayfleet.serve.keys import REFUSED, KeyMissing, KeySource, matches

T = TypeVar("T", bound=BaseModel)


class RequestError(Exception):
    def __init__(self, status: int, message: str, code: str = "invalid_request", kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code, self.kind = status, message, code, kind


def error_response(status: int, message: str, code: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": code}}, status_code=status)


class RequireKey(BaseHTTPMiddleware):
    """401 for any request without the key. The key is read in the process that serves (the replica), once."""

    def __init__(self, app, source: KeySource):
        super().__init__(app)
        self.source, self.key = source, None

    async def dispatch(self, request: Request, call_next):
        if self.key is None:
            try:
                self.key = self.source.read()
            except KeyMissing as exc:
                return error_response(503, str(exc), "no_api_key", "server_error")
        if not matches(request.headers.get("authorization"), self.key):
            return error_response(401, REFUSED, "invalid_api_key", "authentication_error")
        return await call_next(request)


def api_app(source: KeySource | None) -> FastAPI:
    """A FastAPI app that turns RequestError into its response, behind RequireKey unless the serve gate checks
    the key in front of Serve (`source` None: keys.replica_key)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    if source is not None:
        app.add_middleware(RequireKey, source=source)

    @app.exception_handler(RequestError)
    async def request_error(_request: Request, exc: RequestError):
        return error_response(exc.status, exc.message, exc.code, exc.kind)

    return app


async def parse(request: Request, schema: type[T]) -> T:
    """The request body as `schema`, or a 400 that names the field."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError(400, "the request body is not JSON") from None
    try:
        return schema.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise RequestError(400, f"{where}: {first['msg']}") from None
