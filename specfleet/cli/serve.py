"""`specfleet serve`: the fleet and the store's history in a browser (read-only)."""

from __future__ import annotations

import errno
import os
import socket
import stat
from pathlib import Path
from typing import Annotated

import typer

from specfleet.cli.options import MATRIX_ID, DbOption, not_blank
from specfleet.errors import UserError, extra_install
from specfleet.settings import is_loopback
from specfleet.userfiles import given_path, read_text

DEFAULT_PORT = 8266  # next to Ray's dashboard (8265) on a head


def check_free(host: str, port: int) -> None:
    """Fail with one line before starting when the port is taken (uvicorn would log it).

    Binds as asyncio's `create_server` (uvicorn's listener) does: every address `host`
    resolves to, SO_REUSEADDR (a restart is not refused while the last run's connections
    linger in TIME_WAIT), IPv6 sockets IPv6-only.
    """
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise UserError(f"--host {host!r}: cannot resolve it ({err.strerror}); expected an "
                        "address of this machine, e.g. 127.0.0.1 or 0.0.0.0") from None
    except UnicodeError:  # the resolver's IDNA codec: a dot-separated label empty or over 63
        raise UserError(f"--host {host!r}: not a host name (a label between dots is empty or "
                        "over 63 characters); expected an address of this machine, e.g. "
                        "127.0.0.1 or 0.0.0.0") from None
    for family, kind, proto, _, address in found:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
            except OSError as err:
                raise _bind_error(host, port, err) from None


def _bind_error(host: str, port: int, err: OSError) -> UserError:
    if err.errno in (errno.EADDRINUSE, errno.EACCES):
        return UserError(f"--port {port}: cannot listen on {host} ({err.strerror}); pick "
                         "another with --port")
    return UserError(f"--host {host}: not an address of this machine ({err.strerror}); "
                     "expected one of its addresses, e.g. 127.0.0.1 or 0.0.0.0")


def url_of(host: str, port: int, path: str = "/") -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{path}"


def view_token(host: str, token_file: str | None) -> tuple[str | None, str]:
    """The token the view asks for and where it came from, read before anything starts.

    `--token-file` when given (on loopback too), else open on loopback, else the fleet's token.

    Raises:
        UserError: a bad token file, or a non-loopback `--host` with no token to ask for.
    """
    from specfleet.serve.auth import check_token

    if token_file is not None:
        expected = "a file holding the token"
        label = f"--token-file {token_file}"
        path = given_path(token_file, "--token-file", expected)
        token = check_token(read_text(path, label, expected), label)
        _refuse_shared(path, label)
        return token, f"the token in {token_file}"
    if is_loopback(host):
        return None, ""
    return fleet_token(host)


def _refuse_shared(path: Path, label: str) -> None:
    """A token file other users may read (or replace) gives them the view: refuse it, as
    ssh refuses such a key."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise UserError(f"{label}: other users may read or change it (mode {mode:04o}); "
                        f"expected a file only its owner can use (chmod 600 {path})")


def fleet_token(host: str) -> tuple[str, str]:
    """The fleet's token ($RAY_AUTH_TOKEN, else its token file) and where it came from."""
    from specfleet.cluster.raytoken import token_path
    from specfleet.serve.auth import check_token

    if os.environ.get("RAY_AUTH_TOKEN"):
        return check_token(os.environ["RAY_AUTH_TOKEN"], "RAY_AUTH_TOKEN"), \
            "the fleet's token ($RAY_AUTH_TOKEN)"
    path = token_path()
    if not os.path.exists(path):  # False (not an error) where a parent is unreadable too
        raise UserError(f"--host {host}: the view would show every stored prompt and output to "
                        "the network; pass --token-file PATH (a file holding the token to log "
                        f"in with), or copy the fleet's token to {path}")
    label = f"the fleet's token file {path}"
    return check_token(read_text(path, label), label), f"the fleet's token ({path})"


def serve(
    db: DbOption = None,
    address: Annotated[str | None, typer.Option(
        "--address", help="Fleet head HOST:PORT for the fleet page; default $SPECFLEET_ADDRESS, "
        "$RAY_ADDRESS, the fleet this machine joined; none: the page says so.")] = None,
    port: Annotated[int, typer.Option(
        "--port", min=1, max=65535, help="Port to listen on.")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option(
        "--host", help="Address to bind (default 127.0.0.1, open). Anything else is reachable "
        "from the network and needs a token on every page and API call: --token-file, else "
        "the fleet's token.")] = "127.0.0.1",
    token_file: Annotated[str | None, typer.Option(
        "--token-file", help="A file holding the token people log in with (or send as "
        "`Authorization: Bearer`); one line, 16+ characters. Also on loopback.")] = None,
    matrix: Annotated[str | None, typer.Option(
        "--matrix", callback=not_blank(MATRIX_ID),
        help="Print the address of this matrix's page (checked first).")] = None,
) -> None:
    """Serve a read-only web view of the store and the fleet (Ctrl-C stops it)."""
    try:
        import uvicorn

        from specfleet.serve import create_app
    except ImportError as err:
        raise UserError(f"specfleet serve needs the `serve` extra ({err.name} is missing): "
                        f"{extra_install('serve')}") from None
    from specfleet.serve.fleetpage import FleetReader, fleet_address
    from specfleet.store.readonly import open_read_only

    if not host.strip():  # the socket layer reads '' as every address, the URL as http://:PORT
        raise UserError(f"--host {host!r} is blank; expected an address of this machine, e.g. "
                        "127.0.0.1 or 0.0.0.0")
    token, token_from = view_token(host, token_file)
    address = fleet_address(address)
    store = open_read_only(db)
    if matrix is not None:
        store.get_matrix(matrix)  # an unknown id: one line, before listening
    check_free(host, port)
    if address:
        _warn_of_fleet(address)
    _say_listening(host, port, store.display_url, address, token_from if token else None, matrix)
    app = create_app(store, FleetReader(address) if address else None, token)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning",
                    server_header=False)  # a stranger learns nothing of the software
    finally:
        store.close()


def _warn_of_fleet(address: str) -> None:
    """A warning, not a refusal, where no Ray head answers at `address`: the store's pages
    serve without the fleet."""
    from specfleet.cluster.reach import NO_HTTP2, connect_error, speaks_http2
    from specfleet.serve.fleetpage import REACH_TIMEOUT_S

    if unreachable := connect_error(address, REACH_TIMEOUT_S):
        typer.echo(f"warning: fleet {address}: no Ray head answers there ({unreachable}); the "
                   "fleet page will say so", err=True)
    elif speaks_http2(address, REACH_TIMEOUT_S) is False:  # a web server there
        typer.echo(f"warning: fleet {address}: what answers there is not a Ray head "
                   f"({NO_HTTP2}); the fleet page will say so", err=True)


def _say_listening(host: str, port: int, store_url: str, address: str | None,
                   token_from: str | None, matrix: str | None) -> None:
    """Where the view listens, what it serves and who may read it (`token_from`: where its
    token came from; None: no token), on stderr."""
    # Loopback is open to every account on the machine, not only to its owner's.
    login = (f"needs a token: {token_from}" if token_from is not None
             else "open to every account on this machine: --token-file asks for one")
    typer.echo(f"specfleet serve: {url_of(host, port)} (store {store_url}, read-only; "
               f"fleet {address or 'none'}; {login})", err=True)
    if not is_loopback(host):
        typer.echo(f"note: --host {host}: plain HTTP, the token and the pages cross the network "
                   "unencrypted; on a network you do not trust, use an SSH tunnel or a TLS "
                   "proxy instead", err=True)
    if matrix is not None:
        typer.echo(f"matrix {matrix}: {url_of(host, port, f'/matrices/{matrix}')}", err=True)


def register(app: typer.Typer) -> None:
    """Add `serve` to the root app."""
    app.command("serve")(serve)
