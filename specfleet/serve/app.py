"""The Starlette app behind `specfleet serve`: routes, error pages, headers.

Every page has a JSON twin under `/api/...`. Only GET (and HEAD) are routed (and the login
form's POST), the store is opened read-only, no route takes SQL or a file path, and every
response forbids scripts from anywhere but the app itself (Content-Security-Policy) on top of
Jinja's escaping. With a token, every page and API call needs it (`auth.py`).
"""

from __future__ import annotations

import io
import time
from functools import partial
from pathlib import Path

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
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from specfleet.errors import UserError
from specfleet.serve import pages, params
from specfleet.serve.auth import OPEN_PREFIX, Login, TokenGate
from specfleet.serve.fleetpage import FleetReader, fleet_page
from specfleet.store.export import export_runs
from specfleet.store.store import Store

HERE = Path(__file__).parent
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def _templates() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"),
                      autoescape=select_autoescape(["html", "svg"], default=True))
    env.globals["history_href"] = pages.history_href
    env.filters["num"] = lambda v, d=2: "–" if v is None else f"{v:.{d}f}"
    return env


class NotFound(Exception):
    """A matrix, cell or page that is not there (404 page with a link back)."""


class Views:
    """The route handlers over one read-only store and (optionally) a fleet."""

    def __init__(self, store: Store, fleet: FleetReader | None):
        self.store, self.fleet, self.env = store, fleet, _templates()

    def html(self, template: str, context: dict, status: int = 200) -> HTMLResponse:
        body = self.env.get_template(template).render(store_url=self.store.display_url,
                                                      **context)
        return HTMLResponse(body, status_code=status)

    async def _page(self, request: Request, build, template: str, allowed: dict,
                    required: tuple = (), **path) -> Response:
        query = params.parse(request.query_params, allowed, required)
        as_json = request.url.path.startswith("/api/")
        built = await run_in_threadpool(build, **path, **query, as_json=as_json)
        return JSONResponse(built) if as_json else self.html(template, built)

    async def fleet_view(self, request: Request) -> Response:
        return await self._page(
            request, partial(fleet_page, self.fleet, self.store), "fleet.html",
            {})

    async def matrices(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.matrices_page, self.store),
            "matrices.html", {"page": params.page_number})

    async def matrix(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.matrix_page, self.store),
            "matrix.html", {}, matrix_id=request.path_params["matrix_id"])

    async def parity(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.parity_page, self.store),
            "parity.html", {}, matrix_id=request.path_params["matrix_id"])

    async def progress(self, request: Request) -> Response:
        params.parse(request.query_params, {})
        matrix_id = request.path_params["matrix_id"]
        matrix = await run_in_threadpool(self.store.get_matrix, matrix_id)
        return JSONResponse(pages.progress(matrix))

    async def runs(self, request: Request) -> Response:
        return await self._page(
            request, partial(pages.runs_page, self.store),
            "runs.html", {"page": params.page_number},
            matrix_id=request.path_params["matrix_id"])

    async def download(self, request: Request) -> Response:
        params.parse(request.query_params, {})
        matrix_id, fmt = request.path_params["matrix_id"], request.path_params["fmt"]
        runs = await run_in_threadpool(self._runs_of, matrix_id)
        out = io.StringIO()
        export_runs(runs, fmt, out)
        media = "application/json" if fmt == "json" else "text/csv; charset=utf-8"
        disposition = f'attachment; filename="{matrix_id}-runs.{fmt}"'
        return Response(out.getvalue(), media_type=media,
                        headers={"Content-Disposition": disposition})

    def _runs_of(self, matrix_id: str):
        self.store.get_matrix(matrix_id)
        return self.store.runs(matrix=matrix_id)

    async def spec(self, request: Request) -> Response:
        params.parse(request.query_params, {})
        matrix = await run_in_threadpool(self.store.get_matrix, request.path_params["matrix_id"])
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
        params.parse(request.query_params, {})
        return RedirectResponse("/matrices", status_code=307)


def _error_handlers(views: Views) -> dict:
    def wants_json(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    async def bad_parameter(request: Request, err: params.BadParameter) -> Response:
        return PlainTextResponse(f"error: {err}\n", status_code=400)

    async def missing(request: Request, err: Exception) -> Response:
        message = str(err) if isinstance(err, UserError | NotFound) else "no such page"
        if isinstance(err, HTTPException) and err.status_code != 404:
            return PlainTextResponse(f"error: {err.detail}\n", status_code=err.status_code)
        if wants_json(request):
            return JSONResponse({"error": message}, status_code=404)
        return views.html("missing.html", {"message": message, "path": request.url.path},
                          status=404)

    return {params.BadParameter: bad_parameter, UserError: missing, NotFound: missing,
            HTTPException: missing}


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
        Route("/login", login.form, methods=get),
        Route("/login", login.submit, methods=["POST"]),
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
        Route("/history", v.history, methods=get),
        Route("/api/history", v.history, methods=get),
        Route("/compare", v.compare, methods=get),
        Route("/api/compare", v.compare, methods=get),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    # SecurityHeaders outermost: a refusal carries the same headers as a page.
    middleware = [Middleware(SecurityHeaders), Middleware(TokenGate, token=token)]
    return Starlette(routes=routes, exception_handlers=_error_handlers(v), middleware=middleware)


class SecurityHeaders:
    """ASGI middleware: the CSP and friends on every response, no caching of anything but the
    static assets (pages hold prompts and outputs), and the server time."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Content-Security-Policy"] = CSP
                headers["X-Content-Type-Options"] = "nosniff"
                headers["Referrer-Policy"] = "no-referrer"
                if not scope["path"].startswith(OPEN_PREFIX):
                    headers["Cache-Control"] = "no-store"
                # Server time, read by bench/serve.py (browsers' devtools show it too).
                elapsed_ms = (time.perf_counter() - started) * 1e3
                headers["Server-Timing"] = f"app;dur={elapsed_ms:.1f}"
            await send(message)

        await self.app(scope, receive, send_with_headers)
