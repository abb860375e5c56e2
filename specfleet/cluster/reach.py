"""How a client reaches a fleet: which fleet a command talks to, the one line that says so,
the HOST:PORT of a head (parsed here only), and the fleet's workers and targets.

Every command that talks to a fleet resolves it in this order: `--address`,
`$SPECFLEET_ADDRESS`, `$RAY_ADDRESS`, the fleet this machine joined (`fleet up` / `fleet join`
remember it until `fleet leave`), else the embedded fleet (a private Ray instance on
127.0.0.1). `--embedded` forces the embedded fleet whatever is set. Each address is a head's
HOST:PORT; `RAY_ADDRESS=auto` is Ray's own word for the cluster `ray start` last started on
this machine, read where Ray reads it (`ray_cluster_file`). A Ray Client (`ray://`) or
dashboard (`http://`) address is refused: specfleet talks to the head's GCS. `open_fleet` then
connects, says which fleet in one stderr line, finds every host by its label, makes sure each
has its worker, and asks each worker for its targets: the scheduler gets worker handles and
the planner gets (host, engine, device) targets.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import socket
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specfleet.engine.kinds import ENGINE_DEVICES
from specfleet.errors import UserError, one_line
from specfleet.jobs.run import Target
from specfleet.settings import ADDRESS, check_worker_settings
from specfleet.userfiles import read_text

RAY_ADDRESS_ENV = "RAY_ADDRESS"
RAY_AUTO = "auto"  # Ray's word for the cluster `ray start` last started on this machine
RAY_CLUSTER_FILE = "ray_current_cluster"  # where `ray start --head` writes its address
EMBEDDED = "embedded"
JOINED = "the fleet this machine joined"
INFO_TIMEOUT_S = 30.0  # a worker that is starting up imports the engine first
# A name or IPv4 address, or an IPv6 one in brackets (Ray's form; a link-local one with its
# zone, [fe80::1%eth0]), then the port.
_ADDRESS = re.compile(
    r"^(\[[0-9A-Fa-f:.]+(%[A-Za-z0-9_.-]+)?\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$")  # \d: any digits


@dataclass(frozen=True)
class FleetChoice:
    """The fleet a command uses: a head address (None: embedded) and where it came from."""

    address: str | None
    source: str  # "--address", "$SPECFLEET_ADDRESS", "$RAY_ADDRESS", its `auto`, JOINED, EMBEDDED

    @property
    def embedded(self) -> bool:
        return self.address is None


def check_address(address: str | None, flag: str = "--address") -> str | None:
    """HOST:PORT with a port in 1..65535, an IPv6 host in brackets (`flag` names where the
    value came from)."""
    if address is None:
        return None
    scheme = address.partition("://")[0].lower() if "://" in address else None
    if scheme is not None:  # Ray's other addresses; the head's GCS has no scheme
        what = {"ray": "a Ray Client address", "http": "a Ray dashboard address",
                "https": "a Ray dashboard address"}.get(scheme, f"a {scheme}:// URL")
        raise UserError(f"{flag} {address!r}: {what}, which specfleet does not use; expected "
                        "the head's HOST:PORT (its GCS port, 6379 by default), e.g. "
                        "192.168.1.10:6379")
    if address.count(":") > 1 and not address.startswith("["):
        # Ray splits an address at its last colon only after brackets: "::1:6379" is malformed
        raise UserError(f"{flag} {address!r}: an IPv6 address goes in brackets; expected "
                        "[HOST]:PORT, e.g. [fd00::10]:6379")
    example = "[fd00::10]:6379" if address.startswith("[") else "192.168.1.10:6379"
    if not _ADDRESS.match(address) or not _host_valid(address):
        raise UserError(f"{flag} {address!r}: expected HOST:PORT, e.g. {example}")
    if not 0 < (port := host_port(address)[1]) < 65536:
        raise UserError(f"{flag} {address!r}: port {port} is outside 1-65535; expected "
                        f"HOST:PORT, e.g. {example}")
    return address


def _host_valid(address: str) -> bool:
    """A bracketed host is an IPv6 address; any other is a name the resolver can take."""
    host = host_port(address)[0]
    if address.startswith("["):
        try:
            return ipaddress.ip_address(host).version == 6
        except ValueError:
            return False
    return _dns_sized(host)


def _dns_sized(host: str) -> bool:
    """Labels of 1-63 characters, 253 in all (a trailing dot allowed): the resolver's codec
    raises on anything else instead of failing the connection."""
    name = host.removesuffix(".")
    return len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def host_port(address: str) -> tuple[str, int]:
    """HOST:PORT split at its last colon, an IPv6 host's brackets removed (check it first
    with `check_address`)."""
    host, _, port = address.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def join_host_port(host: str, port: int) -> str:
    """HOST:PORT as Ray reads it: an IPv6 host in brackets ([fd00::10]:6379)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def connect_error(address: str, timeout_s: float) -> OSError | None:
    """Why a TCP connection to the head at `address` fails, or None when one opens."""
    try:
        socket.create_connection(host_port(address), timeout=timeout_s).close()
    except OSError as err:
        return err
    return None


def choose_fleet(
    address: str | None = None,
    embedded: bool = False,
    env: Mapping[str, str] | None = None,
    joined: str | None | bool = True,
) -> FleetChoice:
    """Resolve the fleet in the documented order (see the module docstring).

    Args:
        address: the `--address` flag.
        embedded: the `--embedded` flag (refused together with `--address`).
        env: the environment to read (default `os.environ`).
        joined: the joined fleet's address; True reads this machine's node record.

    Raises:
        UserError: both flags given, or a malformed address (the message names its source).
    """
    if embedded and address is not None:
        raise UserError("--embedded and --address: give one of them; expected --embedded (a "
                        "private fleet on this machine) or --address HOST:PORT, not both")
    if embedded:
        return FleetChoice(None, EMBEDDED)
    env = os.environ if env is None else env
    if address is not None:
        return FleetChoice(check_address(address), "--address")
    named = ((ADDRESS.name, ADDRESS.read(env)), (RAY_ADDRESS_ENV, env.get(RAY_ADDRESS_ENV)))
    for name, value in named:
        if name == RAY_ADDRESS_ENV and value == RAY_AUTO:
            return _ray_auto(env)
        if value:
            return FleetChoice(check_address(value, f"${name}"), f"${name}")
    if joined is True:
        from specfleet.cluster.noderecord import joined_fleet

        joined = joined_fleet()
    if joined:
        return FleetChoice(str(joined), JOINED)
    return FleetChoice(None, EMBEDDED)


def ray_cluster_file(env: Mapping[str, str]) -> Path:
    """Where `ray start` records the cluster it started on this machine (`ray stop` removes
    it), and so what `RAY_ADDRESS=auto` reads: `ray_current_cluster` in Ray's default temp
    dir, `$RAY_TMPDIR/ray`, else `$TMPDIR/ray` on Linux, else `/tmp/ray`."""
    base = env.get("RAY_TMPDIR")
    if base is None and sys.platform.startswith("linux"):
        base = env.get("TMPDIR")
    return Path(base if base is not None else "/tmp", "ray", RAY_CLUSTER_FILE)


def _ray_auto(env: Mapping[str, str]) -> FleetChoice:
    path = ray_cluster_file(env)
    source = f"${RAY_ADDRESS_ENV}={RAY_AUTO} via {path}"
    if not path.exists():  # Ray's `auto` fails here too, rather than start a cluster
        raise UserError(f"${RAY_ADDRESS_ENV}={RAY_AUTO}: no Ray cluster started on this machine "
                        f"({path}, which `ray start --head` writes, is missing); expected a "
                        "running `ray start`, or the head's HOST:PORT")
    address = read_text(path, source, "the HOST:PORT `ray start` writes").strip()
    return FleetChoice(check_address(address, source), source)


def announce(choice: FleetChoice, hosts: int) -> str:
    """The line every fleet command starts with, e.g. `fleet: 10.0.0.1:6379 (3 hosts)`."""
    if choice.embedded:
        return "fleet: embedded (this machine only)"
    return f"fleet: {choice.address} ({hosts} host{'' if hosts == 1 else 's'})"


@dataclass(frozen=True)
class FleetView:
    """The fleet as a matrix needs it.

    Attributes:
        targets: every (host, engine, device) the workers offer, plus a toy target per host
            when asked for.
        kinds: host name -> kind label (`linux-cpu`, `mac-mlx`, ...).
        workers: host name -> worker actor handle.
        machines: host name -> machine id (hosts on one machine share its machine lock).
        infos: host name -> the worker's `HostInfo` dict (for `Store.upsert_host`).
        suspects: asked-for hosts whose node is gone now but whose worker may come back
            (their handles are in `workers`; the scheduler waits for them, `--wait`).
        fleet_hosts: every live host of the fleet, asked or not (a mistyped host name is
            said with the hosts there are).
    """

    targets: list[Target]
    kinds: dict[str, str]
    workers: dict[str, Any]
    machines: dict[str, str]
    infos: dict[str, dict]
    suspects: list[str] = field(default_factory=list)
    fleet_hosts: list[str] = field(default_factory=list)

    def record_hosts(self, store) -> None:
        """Refresh every host of the view in the store's `hosts` table."""
        for info in self.infos.values():
            store.upsert_host(info)


class FleetStarting(UserError):
    """This machine's `fleet up` / `fleet join` is still inside `ray start`: its node record
    is not written yet, so a command would fall through to the embedded fleet, which is not
    the fleet the user means. Exit 1: not a mistake, a moment too early."""

    exit_code = 1


def connect_fleet(address: str | None, embedded: bool = False) -> FleetChoice:
    """Resolve the fleet (`choose_fleet`), then connect to it or start the
    embedded one. Errors name where the address came from.

    Raises:
        FleetStarting: the fleet resolved to the embedded one only because this machine's
            `fleet up` / `fleet join` has not written its node record yet (`--embedded`
            asks for the embedded fleet all the same).
    """
    from specfleet.cluster import fleet, noderecord, raytoken

    choice = choose_fleet(address, embedded)
    mark = None if embedded or not choice.embedded else noderecord.starting_node()
    if mark is not None:
        raise FleetStarting(f"{mark.what()}; run this again once it is up (`specfleet fleet "
                            "status` says when), or pass --embedded for a private fleet")
    if choice.address is not None:
        raytoken.ensure_token(create=False)  # a missing token is the likelier mistake: say it first
        check_reachable(choice.address, choice.source)
        check_token(choice.address, choice.source)
    else:  # the embedded fleet's worker inherits this environment: say a bad value before it
        check_worker_settings()
    try:
        fleet.connect(choice.address)
    except ConnectionError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else "no answer"
        raise UserError(f"{_where(choice)}: cannot reach a Ray head there ({first})") from None
    return choice


def say_fleet(choice: FleetChoice, hosts: int) -> None:
    """The one line (stderr) saying which fleet this command uses."""
    print(announce(choice, hosts), file=sys.stderr, flush=True)


def _where(choice: FleetChoice) -> str:
    return f"{choice.address} (from {choice.source})"


def check_reachable(address: str, source: str = "--address", timeout_s: float = 3.0) -> None:
    """Fail fast on a wrong address: Ray itself retries an unreachable head for minutes."""
    check_address(address, source)
    err = connect_error(address, timeout_s)
    if err is not None:
        hint = " (run `specfleet fleet leave` or use --embedded)" if "joined" in source else ""
        raise UserError(f"{address} (from {source}): no Ray head answers there "
                        f"({err}){hint}") from None


HEAD_ANSWER_MS = 5000  # how long a listener gets to answer as a Ray head
# A client's HTTP/2 greeting: the connection preface, then an empty SETTINGS frame.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4
NO_HTTP2 = "it answers no HTTP/2 greeting, as a Ray head's GCS (gRPC) does"


def speaks_http2(address: str, timeout_s: float = 2.0) -> bool | None:
    """Whether what listens at HOST:PORT answers an HTTP/2 greeting with a SETTINGS frame,
    as every gRPC server (a Ray head's GCS) does at once; None when it says nothing in time
    or the head may speak TLS (`RAY_USE_TLS`): then only Ray's own client can tell."""
    if os.environ.get("RAY_USE_TLS", "0").lower() not in ("0", "false", ""):
        return None
    try:
        with socket.create_connection(host_port(address), timeout=timeout_s) as sock:
            sock.sendall(_HTTP2_HELLO)
            head = sock.recv(9)
    except TimeoutError:
        return None
    except OSError:
        return False  # refused or reset on the greeting: no gRPC server
    return len(head) >= 4 and head[3] == _SETTINGS_FRAME


def head_client(address: str) -> Any:
    """A client of the head's GCS, connected (its first call asks for the cluster id). A head
    answers in milliseconds; Ray's own GcsClient waits 20 s twice over (a port that is no
    head kept a command 40 s; 15 s at HEAD_ANSWER_MS) while its C++ side logs each retry,
    kept off stderr here. A listener that answers no HTTP/2 greeting (a web server, the
    dashboard) is no head: said at once (`RpcError`), without Ray's wait."""
    # Ray's partial _raylet stub lacks InnerGcsClient (it exists at runtime).
    from ray._raylet import InnerGcsClient  # type: ignore[attr-defined]
    from ray.exceptions import RpcError

    if speaks_http2(address) is False:
        raise RpcError(NO_HTTP2)
    with quiet_stderr():
        return InnerGcsClient.standalone(address, None, HEAD_ANSWER_MS)


def check_token(address: str, source: str = "--address") -> None:
    """Fail fast on a token the head refuses: `ray.init` retries it for ~20 s, then says only
    that it could not connect. One authenticated call to the head's GCS settles it."""
    from ray.exceptions import AuthenticationError, RpcError

    from specfleet.cluster import raytoken

    raytoken.enable_token_auth()
    try:
        head_client(address)
    except AuthenticationError:
        raise token_refused(address, source) from None
    except RpcError as err:  # something listens there, but it is no Ray head (a web server)
        raise not_a_head(address, source, one_line(str(err))) from None


def not_a_head(address: str, source: str, why: str = NO_HTTP2) -> UserError:
    """The one line for a listener at `address` that is no Ray head (a web server, the
    dashboard's port), `source` naming where the address came from."""
    return UserError(f"{address} (from {source}): what answers there is not a Ray head ({why}); "
                     "expected the HOST:PORT `specfleet fleet up` printed")


def token_refused(address: str, source: str) -> UserError:
    """The one line for a head that refuses this process's token: which token, and what to do."""
    from specfleet.cluster import raytoken

    if os.environ.get("RAY_AUTH_TOKEN"):
        which = "the token in $RAY_AUTH_TOKEN: set it to the head's token"
    else:
        which = f"the token at {raytoken.token_path()}: copy the head's token file there"
    return UserError(f"{address} (from {source}): the Ray head there refuses {which}")


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null for the block (C++ logging bypasses sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def open_fleet(
    address: str | None,
    with_toy: bool = False,
    hosts: Iterable[str] | None = None,
    *,
    embedded: bool = False,
) -> FleetView:
    """Resolve the fleet, connect, say which, then collect every live host's worker and
    targets.

    Args:
        address: the `--address` flag (None: resolved as `choose_fleet` says).
        with_toy: add a `toy/cpu` target per host (every worker runs the toy engine).
        hosts: only these hosts (default: every host found by label).
        embedded: the `--embedded` flag.

    Returns:
        The `FleetView`; a host whose worker does not answer is left out with a warning.
    """
    import ray

    from specfleet.cluster import fleet
    from specfleet.workers import actor

    choice = connect_fleet(address, embedded)
    every = fleet.discover_hosts()
    say_fleet(choice, len(every))
    wanted = set(hosts) if hosts is not None else None
    found = [h for h in every if wanted is None or h.host in wanted]
    handles = {h.host: actor.get_worker(h.host) or actor.start_worker(h.host) for h in found}
    refs = {name: handle.info.remote() for name, handle in handles.items()}
    view = FleetView([], {h.host: h.kind for h in found}, {}, {}, {},
                     fleet_hosts=[h.host for h in every])
    for name, ref in refs.items():
        try:
            info = ray.get(ref, timeout=INFO_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - a host that cannot answer is left out
            print(f"warning: host {name} left out: {_first_line(err)}", file=sys.stderr)
            continue
        view.workers[name] = handles[name]
        view.infos[name] = info
        view.machines[name] = info.get("machine_id") or name
        view.targets.extend(_targets(name, info, with_toy))
        for label, reason in sorted(info.get("failed_targets", {}).items()):
            print(f"warning: {name}: {label} left out: it failed its self-test ({reason}); "
                  f"`specfleet selftest` on that host shows the details", file=sys.stderr)
    for name in sorted((wanted or set()) - set(handles)):
        handle = actor.get_worker(name)  # a detached worker outlives its node: it may return
        if handle is not None:
            view.workers[name] = handle
            view.suspects.append(name)
    return view


def _targets(host: str, info: dict, with_toy: bool) -> list[Target]:
    """The host's targets, leaving out any that failed the worker's start-up self-test."""
    failed = info.get("failed_targets", {})
    targets = [
        Target(host=host, engine=engine, device=device)
        for engine, devices in sorted(info.get("engines", {}).items())
        for device in devices
        if f"{engine}/{device}" not in failed
    ]
    if with_toy:
        targets.append(Target(host=host, engine="toy", device=ENGINE_DEVICES["toy"][0]))
    return targets


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
