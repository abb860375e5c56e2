"""A request's body read to its end before anything answers the request.

uvicorn's h11 protocol answers a malformed body (a chunk size that is no number) with its own
400 and closes the connection, yet the request is already the app's: an answer the app sends
then fails inside h11, a traceback in the server's log; an answer sent before the body's end
fails the same way once a bad chunk follows it. Read first, such a body ends as the client
gone, and a client gone mid-body (closed before the length it announced) is nothing to answer.
"""

from __future__ import annotations

from starlette.responses import JSONResponse, PlainTextResponse, Response

MAX_BODY_BYTES = 64 * 1024  # the one body the view reads is the login form (4 KiB at most)


class HttpMiddleware:
    """ASGI middleware that acts on HTTP requests (`http`); any other scope (the server's
    lifespan) passes through untouched."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def http(self, scope, receive, send) -> None:
        raise NotImplementedError


class WholeBody(HttpMiddleware):
    """ASGI middleware: the app gets the request once its body is read, as one message.

    A client gone before the body's end gets no answer and leaves no line in the log; a body
    over `MAX_BODY_BYTES` is read to its end and refused with a 413.
    """

    async def http(self, scope, receive, send) -> None:
        read = await _read_body(receive)
        if read is None:  # gone, or uvicorn refused the body itself: no one to answer
            return
        body, length = read
        if length > MAX_BODY_BYTES:
            await _too_long(scope["path"], length)(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive) -> tuple[bytes, int] | None:
    """The body's first `MAX_BODY_BYTES` and its whole length; None for a client gone first."""
    kept, length = bytearray(), 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return None
        chunk = message.get("body", b"")
        length += len(chunk)
        if length <= MAX_BODY_BYTES:
            kept += chunk
        if not message.get("more_body", False):
            return bytes(kept), length


def _replay(body: bytes, receive):
    """A `receive` that gives the body read, then whatever the server says next."""
    given = False

    async def replay():
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _too_long(path: str, length: int) -> Response:
    message = (f"the request body has {length} bytes, over the {MAX_BODY_BYTES} this view "
               "reads; expected none (only the login form sends a body)")
    if path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=413)
    return PlainTextResponse(f"error: {message}\n", status_code=413)
