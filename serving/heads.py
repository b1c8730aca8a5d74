"""Request heads of ``crossmodal serve`` (the request line and the headers), bounded: a URL over
:data:`MAX_URL_BYTES` is a 414 and a head over :data:`MAX_HEAD_BYTES` a 431, each the API's one JSON message.

Why two places check: uvicorn's HTTP parser (h11) refuses a head that grows past its buffer limit before it
is complete, and uvicorn answered that with a plain-text 400 and closed the socket while the client was still
sending, so the client saw a reset connection and no status. :class:`BoundedH11Protocol` answers it with the
JSON message instead and then reads and drops the rest of the request before closing (a "lingering close":
closing a socket with unread bytes sends a reset that destroys the answer). A head that arrives complete in
one read is never measured by h11 (how a head is cut into reads is the network's choice), so the app checks
the same limits on every request it gets (:func:`head_refusal`): the same answer whatever the packets.
"""

from __future__ import annotations

import json
from http import HTTPStatus

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from serving.bodies import ApiError

#: the longest URL (path and query string) answered; a longer text is POSTed (/api/search/text takes JSON)
MAX_URL_BYTES = 8 * 1024
#: the largest request head (request line and headers); also h11's buffer limit (its own default, 16 KiB)
MAX_HEAD_BYTES = 16 * 1024
#: how long a refused connection is drained before it is closed anyway
LINGER_SECONDS = 5.0


def url_too_long(size: int | None) -> ApiError:
    """414 for a URL of ``size`` bytes (None: cut off while it arrived, its size unknown)."""
    told = "goes past the limit of" if size is None else f"is {size} bytes; the limit is"
    return ApiError(
        414,
        "uri_too_long",
        f"the URL {told} {MAX_URL_BYTES} bytes; send a long text as JSON "
        '(POST /api/search/text {"q": ...})',
    )


def head_too_large(size: int | None) -> ApiError:
    told = "go past the limit of" if size is None else f"are {size} bytes; the limit is"
    return ApiError(431, "headers_too_large", f"the request's URL and headers {told} {MAX_HEAD_BYTES} bytes")


def head_refusal(target_bytes: int, header_bytes: int) -> ApiError | None:
    """The answer to a request whose URL (path and query) is ``target_bytes`` long and whose headers take
    ``header_bytes``, or None when both are within the limits."""
    if target_bytes > MAX_URL_BYTES:
        return url_too_long(target_bytes)
    if target_bytes + header_bytes > MAX_HEAD_BYTES:
        return head_too_large(target_bytes + header_bytes)
    return None


def refusal_bytes(refusal: ApiError) -> bytes:
    """The JSON message as the app writes it (Starlette's ``JSONResponse``)."""
    content = {"error": refusal.message, "reason": refusal.reason}
    return json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode()


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol whose answer to a request it cannot parse is the API's JSON message: 414 for a
    request line past :data:`MAX_HEAD_BYTES`, 431 for headers past it, 400 ``bad_http`` for anything else h11
    refuses; then the connection is drained (at most :data:`LINGER_SECONDS`) and closed."""

    draining = False

    def data_received(self, data: bytes) -> None:
        if self.draining:  # the rest of a refused request: read so the close sends no reset, and dropped
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:  # uvicorn calls it when h11 raises RemoteProtocolError
        pending, _ = self.conn.trailing_data
        if len(pending) <= MAX_HEAD_BYTES:
            refusal = ApiError(400, "bad_http", "the request is not valid HTTP/1.1")
        elif b"\n" not in pending:  # the request line is not even complete
            refusal = url_too_long(None)
        else:
            refusal = head_too_large(None)
        body = refusal_bytes(refusal)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        phrase = HTTPStatus(refusal.status).phrase.encode()
        head = h11.Response(status_code=refusal.status, headers=headers, reason=phrase)
        self.transport.write(self.conn.send(head))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.draining = True
        if self.transport.can_write_eof():
            self.transport.write_eof()  # the answer, then end of stream; the client's bytes are still read
        self.loop.call_later(LINGER_SECONDS, self.transport.close)
