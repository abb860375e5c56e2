"""`specfleet serve`: the fleet and the store's history in a browser (read-only)."""

from __future__ import annotations

import ipaddress
import socket
from typing import Annotated

import typer

from specfleet.cli.fleetlink import DB_HELP
from specfleet.errors import UserError

DEFAULT_PORT = 8266  # next to Ray's dashboard (8265) on a head


def check_port(port: int) -> int:
    if not 0 < port < 65536:
        raise UserError(f"--port {port}: expected 1..65535")
    return port


def check_free(host: str, port: int) -> None:
    """Fail with one line before starting when the port is taken (uvicorn would log it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        try:
            sock.bind((host, port))
        except OSError as err:
            raise UserError(f"--port {port}: cannot listen on {host} ({err.strerror}); "
                            "pick another with --port") from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_of(host: str, port: int, path: str = "/") -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def serve(
    db: Annotated[str | None, typer.Option("--db", help=DB_HELP)] = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Fleet head HOST:PORT for the fleet page; default $SPECFLEET_ADDRESS, "
        "$RAY_ADDRESS, the fleet this machine joined; none: the page says so.")] = None,
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(
        "--host", help="Address to bind (default 127.0.0.1; anything else is reachable from "
        "the network: the view has no login).")] = "127.0.0.1",
    matrix: Annotated[str | None, typer.Option(
        "--matrix", help="Print the address of this matrix's page (checked first).")] = None,
) -> None:
    """Serve a read-only web view of the store and the fleet (Ctrl-C stops it)."""
    try:
        import uvicorn

        from specfleet.serve import create_app
    except ImportError as err:
        raise UserError(f"specfleet serve needs the `serve` extra ({err.name} is missing): "
                        "pip install 'specfleet[serve]'") from None
    from specfleet.serve.fleetpage import FleetReader, fleet_address
    from specfleet.store.readonly import open_read_only

    check_port(port)
    if not is_loopback(host):
        typer.echo(f"warning: --host {host}: the web view is reachable from the network, "
                   "without a login; it shows every stored prompt and output", err=True)
    address = fleet_address(address)
    store = open_read_only(db)
    if matrix is not None:
        store.get_matrix(matrix)  # an unknown id: one line, before listening
    check_free(host, port)
    typer.echo(f"specfleet serve: {url_of(host, port)} (store {store.display_url}, read-only; "
               f"fleet {address or 'none'})", err=True)
    if matrix is not None:
        typer.echo(f"matrix {matrix}: {url_of(host, port, f'/matrices/{matrix}')}", err=True)
    app = create_app(store, FleetReader(address) if address else None)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    """Add `serve` to the root app."""
    app.command("serve")(serve)
