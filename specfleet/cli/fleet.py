"""`specfleet fleet up | join | status | leave`: the Ray cluster spanning the fleet.

See docs/fleet.md for the ports to open and the security model.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from specfleet import jsontext
from specfleet.cli.options import AddressOption, EmbeddedOption, refuse_twice
from specfleet.cluster import noderecord
from specfleet.cluster.reach import check_address
from specfleet.errors import UserError
from specfleet.settings import HOST, SELFTEST, expand_user, host_name_problem
from specfleet.userfiles import check_writable_dir, given_path

app = typer.Typer(
    help="Start, join, inspect and leave the fleet (a Ray cluster).", no_args_is_help=True
)

# Ray puts `session_<date>_<pid>/sockets/plasma_store` (63 bytes) under the temp dir, and an
# AF_UNIX path holds 107 bytes: the limit counts bytes (a multi-byte name has more).
MAX_TEMP_DIR_BYTES = 107 - 63

NameOption = Annotated[
    str | None, typer.Option("--name", help="This host's fleet name (default: host name).")
]
MAX_CPUS = 4096  # past Ray's limit (10^14) `ray start` failed after starting; no host has more
CpusOption = Annotated[int | None, typer.Option(
    "--num-cpus", min=1, max=MAX_CPUS, help="CPUs Ray accounts on this host.")]
NodeIpOption = Annotated[
    str | None, typer.Option("--node-ip", help="This host's address the others reach.")
]
EnginesOption = Annotated[str | None, typer.Option(
    "--engines", help="Offer only these engines, comma-separated (e.g. torch); default: all.")]
SuperviseOption = Annotated[bool, typer.Option(
    "--supervise", help="Stay in the foreground as this host's supervisor (systemd, launchd).")]
TempDirOption = Annotated[str | None, typer.Option(
    "--temp-dir", help="This node's own Ray temp dir (default /tmp/ray-specfleet-NAME).")]


def check_name(name: str | None, label: str = "--name") -> str | None:
    """A fleet node's name is a host name (`settings.host_name_problem`: Ray's label rule) in
    lower case and without '.' (it also names the node's temp dir); `label` names where it came
    from."""
    if name is not None and (host_name_problem(name) or name != name.lower() or "." in name):
        raise UserError(
            f"{label} {name!r}: expected 1-63 lower-case letters, digits, '-' or '_', "
            "starting and ending with a letter or digit"
        )
    return name


def check_engines(engines: str | None) -> list[str] | None:
    """`--engines torch,mlx`: a subset of the engines this host has."""
    if engines is None:
        return None
    from specfleet.engine.kinds import MODEL_ENGINES
    from specfleet.workers.hardware import detect_host

    wanted = [e.strip() for e in engines.split(",")]
    if any(e not in MODEL_ENGINES for e in wanted):  # an empty one too: `torch,,mlx` a typo
        raise UserError(f"--engines {engines!r}: expected a comma-separated subset of "
                        f"{', '.join(MODEL_ENGINES)}")
    refuse_twice("--engines", wanted, "engine")
    present = detect_host().engines
    missing = [e for e in wanted if e not in present]
    if missing:
        raise UserError(f"--engines: this host has no {', '.join(missing)}; expected a "
                        "comma-separated subset of the engines it has: "
                        f"{', '.join(present) or 'none'}")
    return wanted


def _options(num_cpus, node_ip, engines, temp_dir):
    from specfleet.cluster.membership import NodeOptions

    folder = None if temp_dir is None else check_temp_dir(temp_dir)
    if node_ip is not None:
        check_ip(node_ip)
    return NodeOptions(num_cpus, node_ip, check_engines(engines), folder)


def check_temp_dir(text: str) -> str:
    """`--temp-dir` as Ray takes it: `~` expanded and a relative path made absolute from the
    current folder (`ray start` refused both, after it had begun), short enough in bytes for
    Ray's socket paths inside it, and writable."""
    given_path(text, "--temp-dir", "a folder path")
    path = os.path.abspath(expand_user(text, "--temp-dir"))
    if len(os.fsencode(path)) > MAX_TEMP_DIR_BYTES:
        shown = repr(text) if path == text else f"{text!r} ({path})"
        raise UserError(f"--temp-dir {shown}: {_size(path)}; expected at most "
                        f"{MAX_TEMP_DIR_BYTES} bytes (Ray's socket paths inside it are limited "
                        "to 107 bytes)")
    check_writable_dir(Path(path), "--temp-dir")
    return path


def _size(path: str) -> str:
    """`62 characters`, or `44 characters, 88 bytes` where a character takes more than one."""
    size = len(os.fsencode(path))
    return f"{len(path)} characters" + ("" if size == len(path) else f", {size} bytes")


def check_ip(node_ip: str) -> str:
    """`--node-ip`: an IPv4 or IPv6 address of this host (Ray binds and advertises it as
    given; on another machine's address, or a wildcard, `ray start` hangs or is unreachable)."""
    expected = "expected this host's IP address, e.g. 192.168.1.11"
    try:
        address = ipaddress.ip_address(node_ip)
    except ValueError:
        raise UserError(f"--node-ip {node_ip!r}: {expected}") from None
    if address.is_unspecified or address.is_multicast:
        raise UserError(f"--node-ip {node_ip}: not one host's address; {expected}")
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    with socket.socket(family) as sock:
        try:
            sock.bind((node_ip, 0))  # any free port: only whether the address is ours
        except OSError as err:
            raise UserError(f"--node-ip {node_ip}: not an address of this machine "
                            f"({err.strerror}); {expected}") from None
    return node_ip


@app.command("up")
def up_command(
    name: NameOption = None,
    port: Annotated[int, typer.Option(
        "--port", min=1, max=65535,
        help="The head's GCS port, the address every node and client uses: any port free "
             "here but Ray's worker ports (10002-19999); the dashboard and Ray's other fixed "
             "ports move off it.")] = 6379,
    num_cpus: CpusOption = None,
    node_ip: NodeIpOption = None,
    engines: EnginesOption = None,
    temp_dir: TempDirOption = None,
    supervise: SuperviseOption = False,
) -> None:
    """Start the head on this machine (token auth, dashboard on 127.0.0.1) and its worker;
    a supervisor brings the node back when it is lost (--supervise: in the foreground)."""
    from specfleet.cluster.membership import fleet_up
    from specfleet.cluster.supervisor import supervise_here

    options = _options(num_cpus, node_ip, engines, temp_dir)
    host = _host_name(name, temp_dir)
    with noderecord.starting("fleet up", host):  # fleet commands here meanwhile say so
        done = fleet_up(host, port=port, options=options, supervise=not supervise)
    typer.echo(f"head up at {done.address}; host {done.host} ({done.kind}) is in the fleet")
    if "dashboard" in done.ports:  # Ray's 8265, or a free port where a second head runs here
        typer.echo(f"dashboard at http://127.0.0.1:{done.ports['dashboard']} (this machine only)")
    typer.echo(f"on each other host: copy {_token_hint()} (mode 600), then run")
    typer.echo(f"  specfleet fleet join {done.address} --name <host>")
    if supervise:
        supervise_here()


@app.command("join")
def join_command(
    head: Annotated[str, typer.Argument(metavar="HEAD", help="The head's address HOST:PORT.")],
    name: NameOption = None,
    num_cpus: CpusOption = None,
    node_ip: NodeIpOption = None,
    engines: EnginesOption = None,
    temp_dir: TempDirOption = None,
    supervise: SuperviseOption = False,
) -> None:
    """Join the fleet at HEAD as this host (checks Python and Ray versions first); a
    supervisor brings the node back when it is lost (--supervise: in the foreground)."""
    from specfleet.cluster.membership import fleet_join
    from specfleet.cluster.supervisor import supervise_here

    check_address(head, "HEAD")
    options = _options(num_cpus, node_ip, engines, temp_dir)
    host = _host_name(name, temp_dir)
    with noderecord.starting("fleet join", host):
        done = fleet_join(head, host, options=options, supervise=not supervise)
    typer.echo(f"host {done.host} ({done.kind}) joined the fleet at {done.address}")
    if supervise:
        supervise_here()


@app.command("status")
def status_command(
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """Hosts, kinds, targets, default policies, loaded models, busy/idle, health, versions."""
    from specfleet.cluster.fleet import disconnect, fleet_status
    from specfleet.cluster.reach import connect_fleet, say_fleet

    choice = connect_fleet(address, embedded)
    try:
        rows = fleet_status()
    finally:
        disconnect()
    say_fleet(choice, sum(1 for row in rows if row["node_alive"]))
    typer.echo(jsontext.dumps(rows, indent=1) if as_json else render_status(rows))


LeaveAddressOption = Annotated[str | None, typer.Option(
    "--address", help="The head HOST:PORT, where it moved since this machine joined; default "
    "the fleet this machine joined (no variable is read).")]


@app.command("leave")
def leave_command(name: NameOption = None, address: LeaveAddressOption = None) -> None:
    """Stop this host's worker and this host's own Ray node (nothing else of Ray)."""
    from specfleet.cluster.membership import fleet_leave
    from specfleet.cluster.raybind import bind_for

    check_name(name)
    head = check_address(address) or noderecord.joined_fleet()
    if head is not None:  # a loopback head is reached on loopback only
        bind_for(head)
    host = fleet_leave(name, address)
    typer.echo(f"host {host} left the fleet")


def render_status(rows: list[dict]) -> str:
    """A plain-text table of `fleet_status()` rows, one host per block."""
    if not rows:
        return "no hosts in the fleet"
    lines = []
    for row in rows:
        state = row["health"] + (f" ({row['reason']})" if row.get("reason") else "")
        busy = "busy: " + row["run_key"] if row.get("busy") else "idle"
        lines.append(f"{row['host']}  {row['kind']}  {state}  {busy if 'busy' in row else ''}"
                     .rstrip())
        if "targets" in row:
            policies = row["default_policies"]
            lines.append("  targets: " + ", ".join(f"{t} [{policies[t]}]" for t in row["targets"]))
            lines.append("  self-test: " + selftest_text(row.get("selftest") or {}))
            models = [f"{m['engine']}/{m['device']}:{m['path']}" for m in row["loaded_models"]]
            lines.append("  loaded: " + (", ".join(models) or "-"))
            versions = row["versions"]
            lines.append("  versions: " + " ".join(f"{k}={v}" for k, v in versions.items()))
    return "\n".join(lines + conditions_section(rows))


def selftest_text(tests: dict[str, dict]) -> str:
    """`torch/cpu ok (1.2 s), mlx/cpu FAILED: qwen3_next: ...`: each target's start-up test."""
    if not tests:
        return f"not run ({SELFTEST.name}=0)"
    return ", ".join(
        f"{label} ok ({test['seconds']:.1f} s)" if test["passed"]
        else f"{label} FAILED: {test['reason']} (no runs sent)"
        for label, test in sorted(tests.items()))


def conditions_section(rows: list[dict]) -> list[str]:
    """`conditions`: each answering host's power, thermal state, clocks and free memory now,
    and THROTTLED with the reason when a run there would be flagged."""
    lines = ["", "conditions:"]
    for row in rows:
        now = row.get("conditions")
        if not now:
            lines.append(f"  {row['host']}: -")
            continue
        flag = f"  THROTTLED: {now['reason']}" if now["throttled"] else "  ok"
        lines.append(f"  {row['host']}: {now['summary']}{flag}")
    return lines


def _host_name(name: str | None, temp_dir: str | None) -> str:
    """This host's fleet name (--name, else `_default_name`), refused when the Ray temp dir it
    names by default is too long for Ray's sockets: `ray start` failed on a 43-character name
    with Ray's own line."""
    from specfleet.cluster.noderecord import default_temp_dir

    host = check_name(name) or _default_name()
    default = str(default_temp_dir(host))
    if temp_dir is None and len(os.fsencode(default)) > MAX_TEMP_DIR_BYTES:
        raise UserError(f"host name {host!r}: its Ray temp dir {default} is {_size(default)}; "
                        f"expected at most {MAX_TEMP_DIR_BYTES} bytes (Ray's socket paths "
                        "inside it are limited to 107 bytes): a shorter --name, or --temp-dir "
                        "a shorter folder")
    return host


def _default_name() -> str:
    from specfleet.workers.hardware import default_host_name

    label = f"${HOST.name}" if HOST.read() else "this machine's host name"
    return check_name(default_host_name(), label) or ""


def _token_hint() -> str:
    from specfleet.cluster.raytoken import token_path

    return str(token_path())
