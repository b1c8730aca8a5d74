"""Request bodies of ``crossmodal serve``, read no further than their limit and parsed within bounds.

Why a module of its own: a body is the one input a client controls byte by byte. A chunked upload declares
no length, so the limit has to hold while the bytes arrive (Starlette's form parser would read the whole
stream first); JSON nested a few thousand levels deep makes Python's recursive parser raise
``RecursionError`` (a 500), so the depth is measured before parsing, with no recursion at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException

from common.bounded_json import BoundedJsonError, JsonLimits, NotJsonError, loads_bounded

#: deepest nesting of arrays and objects a JSON query may have: a [K, D] vector query is 3 deep
MAX_JSON_DEPTH = 16
#: the longest integer literal a JSON query may hold (309 digits already pass float range: ``not_finite``); a
#: longer one is refused while it is parsed, before Python's own limit (4300 digits, a ValueError) is met
MAX_BODY_INT_DIGITS = 1000
#: multipart framing around an uploaded file (boundaries, headers) allowed on top of the size limit
MULTIPART_OVERHEAD = 16 * 1024

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]


class ApiError(Exception):
    """An answer to a bad request: ``status``, a short ``reason`` code and a one-line ``message``."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def declared_length(request: Request) -> int | None:
    """The body size the client declared (``Content-Length``), None when it declared none; a 400 when it is
    not a byte count."""
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise ApiError(400, "bad_content_length", f"Content-Length {declared[:40]!r} is not a byte count")
    return None if declared is None else int(declared)


def _over(declared: int | None, limit: int, what: str, option: str) -> ApiError:
    if declared is None:  # counted while it arrived: its full size is never known
        return ApiError(413, "too_large", f"the {what} goes past the limit of {limit} bytes{option}; read no further")
    return ApiError(413, "too_large", f"the {what} is {declared} bytes; the limit is {limit} bytes{option}")


def limited_receive(receive: Receive, limit: int, what: str, option: str = "") -> Receive:
    """``receive`` that answers 413 as soon as more than ``limit`` body bytes have arrived: the rest of the
    body is never read (a chunked body declares no length, so counting is the only bound)."""
    received = 0

    async def bounded() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > limit:
                raise _over(None, limit, what, option)
        return message

    return bounded


def bounded_request(request: Request, limit: int, what: str, option: str = "") -> Request:
    """``request`` whose body is read no further than ``limit`` bytes: 413 at once when the client declares
    more, else as soon as more has arrived (:func:`limited_receive`)."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise _over(declared, limit, what, option)
    return Request(request.scope, receive=limited_receive(request.receive, limit, what, option))


async def bounded_form(request: Request, limit: int, option: str) -> FormData:
    """The request's form (one file, a few fields), its body read no further than ``limit`` bytes; a
    malformed multipart body is a 400."""
    bounded = bounded_request(request, limit, "upload", option)
    try:
        return await bounded.form(max_files=1, max_fields=4)
    except HTTPException as error:  # Starlette's answer to a malformed multipart body
        raise ApiError(400, "bad_form", f"the upload is not a readable multipart form: {error.detail}") from None


async def json_body(request: Request, limit: int) -> dict[str, Any]:
    """The request's JSON object, read no further than ``limit`` bytes (413 beyond, whatever the client
    declared) and nested at most :data:`MAX_JSON_DEPTH` deep; a body that is not a JSON object is a 400."""
    data = await bounded_request(request, limit, "query").body()
    try:
        body = loads_bounded(data, "the body", JsonLimits(limit, MAX_JSON_DEPTH, MAX_BODY_INT_DIGITS))
    except NotJsonError as error:
        raise ApiError(400, "invalid_json", f"the body {error.detail}") from None
    except BoundedJsonError as error:
        if error.bound == "digits":
            raise ApiError(400, "too_many_digits", f"the body {error.detail} (beyond float range)") from None
        raise ApiError(
            400, "too_deep", f'the body {error.detail} (a vector is {{"vector": [[...], ...]}}, 3 deep)'
        ) from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "the body must be a JSON object")
    return body
