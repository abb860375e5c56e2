"""The Starlette app behind `specfleet serve`: routes, error pages, headers.

Every page has a JSON twin under `/api/...`. Only GET (and HEAD) are routed (and the login
form's POST), the store is opened read-only, no route takes SQL or a file path, and every
response forbids scripts from anywhere but the app itself (Content-Security-Policy) on top of
Jinja's escaping. With a token, every page and API call needs it (`auth.py`).
"""

from __future__ import annotations

import contextlib
import io
import re
import time
from functools import partial
from http import HTTPStatus
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Match, Mount, Route, Router
from starlette.staticfiles import StaticFiles

from specfleet import jsontext
from specfleet.errors import UserError
from specfleet.serve import pages, params
from specfleet.serve.auth import OPEN_PREFIX, Login, TokenGate, is_open
from specfleet.serve.body import HttpMiddleware, WholeBody
from specfleet.serve.fleetpage import FleetReader, fleet_page
from specfleet.serve.params import NotFound
from specfleet.store.errors import StoreDamaged, StoreUnreachable
from specfleet.store.export import FORMATS, export_runs
from specfleet.store.store import Store

HERE = Path(__file__).parent
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html", "svg"], default=True))
    env.globals["history_href"] = pages.history_href
    env.filters["num"] = _number_text
    env.filters["time"] = pages.time_text
    env.filters["column_classes"] = _column_classes
    return env


LONG_CELL_CHARS = 36  # a grid cell longer than this wraps rather than widen its table


def _column_classes(grid) -> list[str]:
    """Each column's cell class in a terminal grid: a column holding a long text (a verdict, a
    prompt's name) wraps and reads from the left, its header and short cells with it; label
    columns read from the left, numbers from the right."""
    def holds_long(column: int) -> bool:
        return any(len(str(cell)) > LONG_CELL_CHARS
                   for row in grid.rows for cell in row[column:column + 1])

    return ["left long" if holds_long(i) else "left" if i < grid.left_cols else "right"
            for i in range(len(grid.headers))]


def _number_text(value, decimals: int = 2) -> str:
    # A stored load that is no number (a hand-edited `load_before`) made the runs page a 500.
    return f"{value:.{decimals}f}" if isinstance(value, int | float) else "–"


def _query(request: Request, allowed: dict, required: tuple = ()) -> dict:
    """The request's query parameters, checked (`params.parse`); a body is refused, as it
    would be ignored without a word (e.g. `{"page": 2}` sent to /api/matrices)."""
    length = request.headers.get("content-length", "0").strip().lstrip("0")
    if length or "transfer-encoding" in request.headers:
        raise params.BadParameter(f"{request.method} {request.url.path[:80]} takes no request "
                                  "body; expected its parameters in the query string")
    return params.parse(request.query_params, allowed, required)


def _download_name(matrix_id: str) -> str:
    # A stored id is whatever its writer chose: its `"` and `;` added parameters to the
    # header (`filename*=...evil.html`), a line break or a non-Latin-1 character was a 500.
    return re.sub(r"[^A-Za-z0-9._-]", "_", matrix_id)


def _matrix_id(request: Request) -> str:
    return params.stored_id(request.path_params["matrix_id"], "matrix", "matrix list")


class FiniteJSON(JSONResponse):
    """JSON with a non-finite float (a hand-edited store's `inf` tok/s) as null: Starlette's
    refuses NaN and infinity, so the page was a 500."""

    def render(self, content) -> bytes:
        return super().render(jsontext.finite(content))


class Views:
    """The route handlers over one read-only store and (optionally) a fleet."""

    def __init__(self, store: Store, fleet: FleetReader | None):
        self.store, self.fleet, self.env = store, fleet, _templates()

    def html(self, template: str, context: dict, status: int = 200,
             show_store: bool = True) -> HTMLResponse:
        store_url = self.store.display_url if show_store else None
        body = self.env.get_template(template).render(store_url=store_url, **context)
        return HTMLResponse(body, status_code=status)

    async def _page(self, request: Request, build, template: str, allowed: dict,
                    required: tuple = (), **path) -> Response:
        query = _query(request, allowed, required)
        as_json = request.url.path.startswith("/api/")
        built = await run_in_threadpool(build, **path, **query, as_json=as_json)
        return FiniteJSON(built) if as_json else self.html(template, built)

    async def fleet_view(self, request: Request) -> Response:
        return await self._page(
            request, partial(fleet_page, self.fleet, self.store), "fleet.html",
            {})

    async def matrices(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.matrices_page, self.store),
            "matrices.html", {"page": params.page_number, "name": params.name_part})

    async def matrix(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.matrix_page, self.store),
            "matrix.html", {}, matrix_id=_matrix_id(request))

    async def parity(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.parity_page, self.store),
            "parity.html", {}, matrix_id=_matrix_id(request))

    async def progress(self, request: Request) -> Response:
        _query(request, {})
        matrix = await run_in_threadpool(self.store.get_matrix, _matrix_id(request))
        return FiniteJSON(pages.progress(matrix))

    async def runs(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.runs_page, self.store),
            "runs.html", {"page": params.page_number}, matrix_id=_matrix_id(request))

    async def jobs(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.jobs_page, self.store),
            "jobs.html", {"page": params.page_number})

    async def job(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.job_page, self.store),
            "job.html", {"page": params.page_number},
            job_id=params.stored_id(request.path_params["job_id"], "generation job", "job list"))

    async def download(self, request: Request) -> Response:
        _query(request, {})
        matrix_id, fmt = _matrix_id(request), request.path_params["fmt"]
        if fmt not in FORMATS:
            raise NotFound(f"no download runs.{fmt[:40]}; expected "
                           f"{' or '.join('runs.' + f for f in FORMATS)}")
        runs = await run_in_threadpool(self._runs_of, matrix_id)
        out = io.StringIO()
        export_runs(runs, fmt, out)
        media = "application/json" if fmt == "json" else "text/csv; charset=utf-8"
        disposition = f'attachment; filename="{_download_name(matrix_id)}-runs.{fmt}"'
        return Response(out.getvalue(), media_type=media,
                        headers={"Content-Disposition": disposition})

    def _runs_of(self, matrix_id: str):
        self.store.get_matrix(matrix_id)
        return self.store.runs(matrix=matrix_id)

    async def spec(self, request: Request) -> Response:
        _query(request, {})
        matrix = await run_in_threadpool(self.store.get_matrix, _matrix_id(request))
        return PlainTextResponse(pages.spec_yaml(matrix.spec),
                                 media_type="text/plain; charset=utf-8")

    async def history(self, request: Request) -> Response:
        allowed = {"model": params.text, "prompt": params.text, "arm": params.arm,
                   "target": params.target, "last": params.count_or_all}
        return await self._page(
            request, partial(pages.history_page, self.store), "history.html", allowed,
            required=("model", "prompt", "arm"))

    async def compare(self, request: Request) -> Response:
        allowed = {"a": params.text, "b": params.text, "allow_mixed": params.flag}
        return await self._page(
            request, partial(pages.compare_page, self.store), "compare.html", allowed,
            required=("a", "b"))

    async def home(self, request: Request) -> Response:
        _query(request, {})
        return RedirectResponse("/matrices", status_code=307)


# An error page's way back: the list the asked page belongs to (its first path segment).
WAYS_BACK = {"jobs": ("/jobs", "the generation jobs"), "fleet": ("/fleet", "the fleet"),
             "login": ("/login", "the login")}
MATRICES_BACK = ("/matrices", "the matrices")


def way_back(path: str) -> tuple[str, str]:
    """Where an error page at `path` links back to, and what it calls that page: an unknown
    job goes back to the jobs, not the matrices; anything else to the matrices."""
    return WAYS_BACK.get(path.strip("/").split("/")[0], MATRICES_BACK)


def _error_handlers(views: Views) -> dict:
    def answer(request: Request, status: int, message: str,
               headers: dict | None = None) -> Response:
        """One line: JSON under /api/; a page for a 404, and for any error a browser asked
        for (a refused compare form or page number was bare text, with no way back); else
        text."""
        path = request.url.path
        if path.startswith("/api/"):
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        if status != 404 and "text/html" not in request.headers.get("accept", ""):
            return PlainTextResponse(f"error: {message}\n", status_code=status, headers=headers)
        # The token gate lets /static/ and /login through unasked: show them nothing stored.
        heading = HTTPStatus(status).phrase.capitalize()  # "Bad request", "Not found"
        back_href, back_to = way_back(path)
        page = views.html("error.html", {"message": message, "heading": heading,
                                         "back_href": back_href, "back_to": back_to},
                          status=status, show_store=not is_open(path))
        page.headers.update(headers or {})
        return page

    async def bad_parameter(request: Request, err: params.BadParameter) -> Response:
        return answer(request, 400, str(err))

    async def missing(request: Request, err: Exception) -> Response:
        return answer(request, 404, str(err))

    async def store_unavailable(request: Request, err: Exception) -> Response:
        # The store's fault, not the visitor's: a 404 "Not found" page sent them looking.
        return answer(request, 503, str(err))

    async def server_error(request: Request, err: Exception) -> Response:
        # Starlette answers a bug outside every middleware: without these, the 500 had no
        # CSP and could be cached. The traceback goes to the server's log, never the page.
        message = "the view failed on this request (a bug: the server's log has its traceback)"
        try:
            response = answer(request, 500, message)
        except Exception:  # the bug may be in the templates the error page is drawn with
            response = PlainTextResponse(f"error: {message}\n", status_code=500)
        response.headers.update(security_headers(request.url.path))
        return response

    async def http_error(request: Request, err: HTTPException) -> Response:
        headers = dict(err.headers or {})
        if err.status_code == 405:
            allow = headers.setdefault("Allow", "GET, HEAD")  # StaticFiles sends none
            return answer(request, 405, f"method {request.method} is not allowed here; "
                          f"expected {allow}", headers)
        message = "no such page" if err.status_code == 404 else err.detail
        return answer(request, err.status_code, message, headers)

    return {params.BadParameter: bad_parameter, UserError: missing, NotFound: missing,
            StoreUnreachable: store_unavailable, StoreDamaged: store_unavailable,
            HTTPException: http_error, Exception: server_error}


def _slash_redirect(router: Router):
    """The router's 404, except that a route's path with a trailing slash goes to the route by
    a path-only Location (Starlette's own redirect copies the request's Host header there)."""
    async def default(scope, receive, send):
        path = scope["path"].rstrip("/")
        if path != scope["path"]:
            stripped = {**scope, "path": path}
            if any(route.matches(stripped)[0] is not Match.NONE for route in router.routes):
                query = scope.get("query_string", b"").decode("latin-1")
                location = quote(path) + (f"?{query}" if query else "")
                await RedirectResponse(location, status_code=307)(scope, receive, send)
                return
        await router.not_found(scope, receive, send)

    return default


def create_app(store: Store, fleet: FleetReader | None = None,
               token: str | None = None) -> Starlette:
    """The web app over a store opened with `store.readonly.open_read_only`.

    Args:
        store: the (read-only) store every page reads.
        fleet: reads the fleet's status for the fleet page (None: no fleet).
        token: the token every page and API call needs (None: open, for loopback only).
    """
    v = Views(store, fleet)
    login = Login(token, v.html)
    get = ["GET"]
    routes = [
        Route("/login", login.page, methods=["GET", "POST"]),  # one route: one Allow header
        Route("/", v.home, methods=get),
        Route("/fleet", v.fleet_view, methods=get),
        Route("/api/fleet", v.fleet_view, methods=get),
        Route("/matrices", v.matrices, methods=get),
        Route("/api/matrices", v.matrices, methods=get),
        Route("/matrices/{matrix_id}", v.matrix, methods=get),
        Route("/api/matrices/{matrix_id}", v.matrix, methods=get),
        Route("/api/matrices/{matrix_id}/progress", v.progress, methods=get),
        Route("/matrices/{matrix_id}/parity", v.parity, methods=get),
        Route("/api/matrices/{matrix_id}/parity", v.parity, methods=get),
        Route("/matrices/{matrix_id}/runs", v.runs, methods=get),
        Route("/api/matrices/{matrix_id}/runs", v.runs, methods=get),
        Route("/matrices/{matrix_id}/runs.{fmt:str}", v.download, methods=get),
        Route("/matrices/{matrix_id}/spec.yaml", v.spec, methods=get),
        Route("/jobs", v.jobs, methods=get),
        Route("/api/jobs", v.jobs, methods=get),
        Route("/jobs/{job_id}", v.job, methods=get),
        Route("/api/jobs/{job_id}", v.job, methods=get),
        Route("/history", v.history, methods=get),
        Route("/api/history", v.history, methods=get),
        Route("/compare", v.compare, methods=get),
        Route("/api/compare", v.compare, methods=get),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # SecurityHeaders outermost: a refusal carries the same headers as a page. WholeBody
    # before any answer, the token gate's refusals too: see body.py.
    middleware = [Middleware(SecurityHeaders), Middleware(WholeBody),
                  Middleware(TokenGate, token=token)]
    app = Starlette(routes=routes, exception_handlers=_error_handlers(v), middleware=middleware,
                    lifespan=_lifespan(fleet))
    app.router.redirect_slashes = False
    app.router.default = _slash_redirect(app.router)
    return app


def _lifespan(fleet: FleetReader | None):
    """The server's start and stop: with a fleet, its signal handlers kept across connects."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        if fleet is not None:
            await fleet.keep_signal_handlers()
        yield

    return lifespan


def security_headers(path: str) -> dict[str, str]:
    """What every response carries: scripts only from the app, no framing (X-Frame-Options
    for browsers without frame-ancestors), nothing read cross-origin, no Referer, and no
    caching of anything but the static assets (pages hold prompts and outputs)."""
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
               "X-Frame-Options": "DENY", "Cross-Origin-Resource-Policy": "same-origin",
               "Referrer-Policy": "no-referrer"}
    return headers if path.startswith(OPEN_PREFIX) else {**headers, "Cache-Control": "no-store"}


class SecurityHeaders(HttpMiddleware):
    """ASGI middleware: `security_headers` on every response, and the server time."""

    async def http(self, scope, receive, send) -> None:
        started = time.perf_counter()

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(security_headers(scope["path"]))
                # Server time, read by bench/serve.py (browsers' devtools show it too).
                elapsed_ms = (time.perf_counter() - started) * 1e3
                headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
            await send(message)

        await self.app(scope, receive, send_with_headers)
