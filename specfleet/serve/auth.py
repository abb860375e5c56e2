"""Who may see the web view: one shared token, checked on every page and API call.

A browser logs in once at `/login` and then carries a cookie holding an HMAC of a fixed label
keyed with the token, never the token itself: the fleet's token is also the key to its Ray
cluster, and a cookie is easier to leak than a file. Scripts send `Authorization: Bearer
TOKEN`. Only `/login` and `/static/` (the stylesheet and the script, no stored data) answer
without either. Every comparison is `hmac.compare_digest`.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from urllib.parse import parse_qs, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from specfleet.errors import UserError, one_line
from specfleet.serve import params
from specfleet.settings import is_loopback

COOKIE = "specfleet_view"
LOGIN_PATH = "/login"
OPEN_PREFIX = "/static/"
HOME = "/matrices"
MIN_TOKEN_CHARS = 16
MAX_FORM_BYTES = 4096  # the login form is two short fields
FORM = "application/x-www-form-urlencoded"
_LABEL = b"specfleet serve: a browser that logged in"
REFUSED = ("this view needs a token: send `Authorization: Bearer TOKEN` or log in at "
           f"{LOGIN_PATH}")
WRONG_TOKEN = ("wrong token: the bearer token sent is not this view's; expected the token "
               "`specfleet serve` was started with (its --token-file, else the fleet's token)")
UNREADABLE = ("unreadable Authorization header; expected exactly one `Authorization: Bearer "
              "TOKEN` header")


def check_token(text: str, label: str) -> str:
    """The token in a token file's (or variable's) text: one line of printable ASCII without
    spaces, at least `MIN_TOKEN_CHARS` long, surrounding white space dropped.

    Raises:
        UserError: one line naming `label` and what a token must be.
    """
    token = text.strip()
    make = "make one with `openssl rand -hex 32`"
    if not token:
        raise UserError(f"{label}: is empty; expected a token ({make})")
    bad = next((ch for ch in token if not (ch.isascii() and ch.isprintable()) or ch == " "),
               None)
    if bad is not None:
        raise UserError(f"{label}: holds {one_line(repr(bad))}; expected one line of printable "
                        f"ASCII without spaces ({make})")
    if len(token) < MIN_TOKEN_CHARS:
        raise UserError(f"{label}: the token has {len(token)} characters; expected at least "
                        f"{MIN_TOKEN_CHARS} ({make})")
    return token


def session_value(token: str) -> str:
    """What the login cookie holds: HMAC-SHA256 of a fixed label keyed with the token."""
    return hmac.new(token.encode(), _LABEL, hashlib.sha256).hexdigest()


def cookie_name(token: str) -> str:
    """The login cookie's name, one per token: browsers keep cookies per host, not per
    port, so two views on one host under one name logged each other out."""
    return f"{COOKIE}_{hashlib.sha256(session_value(token).encode()).hexdigest()[:12]}"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode())


def _bearer(values: list[str]) -> str | None:
    """The bearer token in the Authorization headers sent; None for another kind, an empty
    one, or more than one header (else the first would win without a word)."""
    if len(values) != 1:
        return None
    scheme, _, credentials = values[0].partition(" ")
    return credentials.strip() or None if scheme.lower() == "bearer" else None


def is_open(path: str) -> bool:
    """A path that answers without a token: the login page and the static assets."""
    return path == LOGIN_PATH or path.startswith(OPEN_PREFIX)


def local_path(target: str | None) -> str:
    """`target` when it is a path on this site (never another host, never the login page)."""
    if (not target or not target.startswith("/") or target.startswith("//")
            or "\\" in target or not target.isprintable() or target.startswith(LOGIN_PATH)):
        return HOME
    return target


class TokenGate:
    """ASGI middleware: lets a request through with the right bearer token or login cookie;
    an open view (no token), one whose Host names a loopback address.

    A refused page is a 303 to the login page (which returns to it); a refused API call, or
    any request with a wrong `Authorization` header, is a 401 with a JSON error; a foreign
    Host, a 400.
    """

    def __init__(self, app, token: str | None):
        self.app, self.token = app, token
        self.cookie = None if token is None else session_value(token)
        self.cookie_name = None if token is None else cookie_name(token)

    async def __call__(self, scope, receive, send):
        path = scope.get("path", "")
        if scope["type"] != "http" or (self.token is not None and is_open(path)):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = self.refusal(request) if self.token is not None else _foreign_host(request)
        if refused is None:
            await self.app(scope, receive, send)
        else:
            await refused(scope, receive, send)

    def refusal(self, request: Request) -> Response | None:
        """None for a request that may pass, else the response that refuses it."""
        assert self.token is not None and self.cookie is not None and self.cookie_name
        sent = request.headers.getlist("authorization")
        if sent:  # say which mistake: a header that is no bearer, or a token that is not ours
            bearer = _bearer(sent)
            if bearer is None:
                return _unauthorized(UNREADABLE)
            return None if _same(bearer, self.token) else _unauthorized(WRONG_TOKEN)
        if _same(request.cookies.get(self.cookie_name, ""), self.cookie):
            return None
        if request.url.path.startswith("/api/"):
            return _unauthorized()
        asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"{LOGIN_PATH}?{urlencode({'next': asked})}", status_code=303)


def _foreign_host(request: Request) -> Response | None:
    """An open view's refusal of a Host that names no loopback address, else None: a web
    page whose name a DNS server re-points at 127.0.0.1 (DNS rebinding) would otherwise read
    the store from the browser of whoever runs the view."""
    given = request.headers.get("host")
    if given is None or is_loopback(_host_name(given)):
        return None
    message = (f"Host {given[:80]!r} names no loopback address; expected 127.0.0.1, ::1 or "
               "localhost: an open view answers only there (behind a proxy, serve with "
               "--token-file)")
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message}, status_code=400)
    return PlainTextResponse(f"error: {message}\n", status_code=400)


def _host_name(host: str) -> str:
    """A Host header's name without its port: `[::1]:8266` -> `::1`; "" for one with white
    space (the C resolver reads `127.0.0.1 rebound.example` as 127.0.0.1) or an unclosed
    bracket."""
    if any(ch.isspace() for ch in host):
        return ""
    if host.startswith("["):  # `[::1` without its `]` is no address
        inside, closed, _ = host[1:].partition("]")
        return inside if closed else ""
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def _unauthorized(why: str = REFUSED) -> Response:
    return JSONResponse({"error": why}, status_code=401,
                        headers={"WWW-Authenticate": 'Bearer realm="specfleet"'})


class Login:
    """`GET /login` (the form) and `POST /login` (check the token, set the cookie, go back; a
    wrong token goes back to the form, which says so).

    Args:
        token: the view's token (None: an open view, where both just go to the page asked).
        render: renders a template with a context and a status (the app's `Views.html`).
    """

    def __init__(self, token: str | None, render: Callable[..., Response]):
        self.token, self.render = token, render

    async def page(self, request: Request) -> Response:
        return await (self.submit if request.method == "POST" else self.form)(request)

    async def form(self, request: Request) -> Response:
        asked = params.parse(request.query_params, {"next": str, "wrong": params.flag})
        target = local_path(asked.get("next"))
        if self.token is None:
            return RedirectResponse(target, status_code=303)
        if asked.get("wrong"):  # where a refused POST sends the browser (`submit`)
            return self.render("login.html", {"next": target, "error": "Wrong token."},
                               status=401)
        return self.render("login.html", {"next": target, "error": None})

    async def submit(self, request: Request) -> Response:
        params.parse(request.query_params, {})  # the form sends `next` in its body
        fields = await _form_fields(request)
        target = local_path(fields.get("next"))
        if self.token is None:
            return RedirectResponse(target, status_code=303)
        if not _same(fields.get("token", "").strip(), self.token):
            # Post/Redirect/Get: a page answered to a POST makes Back ask to send it again.
            query = urlencode({"next": target, "wrong": 1})
            return RedirectResponse(f"{LOGIN_PATH}?{query}", status_code=303)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(cookie_name(self.token), session_value(self.token), httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")
        return response


async def _form_fields(request: Request) -> dict[str, str]:
    """A small urlencoded form (the app has no multipart parser and needs none)."""
    kind = request.headers.get("content-type", FORM).partition(";")[0].strip().lower()
    if kind != FORM:  # else a right token sent as JSON would be "Wrong token."
        raise HTTPException(415, f"the login form is sent as {FORM}; got {kind[:80]!r}")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, f"the login form is over {MAX_FORM_BYTES} bytes")
    try:
        pairs = parse_qs(body.decode("utf-8", "replace"), max_num_fields=8)
    except ValueError:
        raise HTTPException(400, "the login form has too many fields") from None
    if twice := next((key for key, values in pairs.items() if len(values) > 1), None):
        raise HTTPException(400, f"the login form has {twice[:80]!r} twice; expected it once")
    return {key: values[0] for key, values in pairs.items()}
