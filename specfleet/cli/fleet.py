"""`specfleet fleet up | join | status | leave`: the Ray cluster spanning the fleet.

See docs/fleet.md for the ports to open and the security model.
"""

from __future__ import annotations

import json
import os
import re
from typing import Annotated

import typer

from specfleet.errors import UserError

app = typer.Typer(
    help="Start, join, inspect and leave the fleet (a Ray cluster).", no_args_is_help=True
)

ADDRESS_ENV = "SPECFLEET_ADDRESS"
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9_.:-]+:\d{1,5}$")

AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        help=f"Head address HOST:PORT (default ${ADDRESS_ENV}; none: the embedded local fleet).",
    ),
]
NameOption = Annotated[
    str | None, typer.Option("--name", help="This host's fleet name (default: host name).")
]
CpusOption = Annotated[
    int | None, typer.Option("--num-cpus", help="CPUs Ray accounts on this host.")
]
NodeIpOption = Annotated[
    str | None, typer.Option("--node-ip", help="This host's address the others reach.")
]


def check_name(name: str | None) -> str | None:
    """A host name is lower-case letters, digits, '-' or '_' (it becomes a label and a name)."""
    if name is not None and not _NAME.match(name):
        raise UserError(
            f"--name {name!r}: use 1-63 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return name


def check_address(address: str | None, flag: str = "--address") -> str | None:
    """HOST:PORT with a port in 1..65535."""
    if address is None:
        return None
    if not _ADDRESS.match(address) or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise UserError(f"{flag} {address!r}: expected HOST:PORT, e.g. 192.168.1.10:6379")
    return address


@app.command("up")
def up_command(
    name: NameOption = None,
    port: Annotated[int, typer.Option("--port", help="GCS port of the head.")] = 6379,
    num_cpus: CpusOption = None,
    node_ip: NodeIpOption = None,
) -> None:
    """Start the head on this machine (token auth, dashboard on 127.0.0.1) and its worker."""
    from specfleet.cluster.membership import fleet_up

    if not 0 < port < 65536:
        raise UserError(f"--port {port}: expected 1..65535")
    done = fleet_up(check_name(name), port=port, num_cpus=num_cpus, node_ip=node_ip)
    typer.echo(f"head up at {done.address}; host {done.host} ({done.kind}) is in the fleet")
    typer.echo(f"on each other host: copy {_token_hint()} (mode 600), then run")
    typer.echo(f"  specfleet fleet join {done.address} --name <host>")


@app.command("join")
def join_command(
    head: Annotated[str, typer.Argument(help="The head's address HOST:PORT.")],
    name: NameOption = None,
    num_cpus: CpusOption = None,
    node_ip: NodeIpOption = None,
) -> None:
    """Join the fleet at HEAD as this host (checks Python and Ray versions first)."""
    from specfleet.cluster.membership import fleet_join

    check_address(head, "HEAD")
    done = fleet_join(head, check_name(name) or _default_name(), num_cpus=num_cpus, node_ip=node_ip)
    typer.echo(f"host {done.host} ({done.kind}) joined the fleet at {done.address}")


@app.command("status")
def status_command(
    address: AddressOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """Hosts, kinds, targets, default policies, loaded models, busy/idle, health, versions."""
    from specfleet.cluster.fleet import connect, disconnect, fleet_status
    from specfleet.cluster.membership import remembered_fleet

    # After `fleet up` / `join` on this machine, its fleet; else the embedded one.
    connect(check_address(address or os.environ.get(ADDRESS_ENV)) or remembered_fleet())
    try:
        rows = fleet_status()
    finally:
        disconnect()
    typer.echo(json.dumps(rows, indent=1) if as_json else render_status(rows))


@app.command("leave")
def leave_command(name: NameOption = None, address: AddressOption = None) -> None:
    """Stop this host's worker and its Ray node (`ray stop`)."""
    from specfleet.cluster.membership import fleet_leave

    target = check_address(address or os.environ.get(ADDRESS_ENV)) or "auto"
    host = fleet_leave(check_name(name), target)
    typer.echo(f"host {host} left the fleet")


def render_status(rows: list[dict]) -> str:
    """A plain-text table of `fleet_status()` rows, one host per block."""
    if not rows:
        return "no hosts in the fleet"
    lines = []
    for row in rows:
        state = row["health"] + (f" ({row['reason']})" if row.get("reason") else "")
        busy = "busy: " + row["run_key"] if row.get("busy") else "idle"
        lines.append(f"{row['host']}  {row['kind']}  {state}  {busy if 'busy' in row else ''}")
        if "targets" in row:
            policies = row["default_policies"]
            lines.append("  targets: " + ", ".join(f"{t} [{policies[t]}]" for t in row["targets"]))
            models = [f"{m['engine']}/{m['device']}:{m['path']}" for m in row["loaded_models"]]
            lines.append("  loaded: " + (", ".join(models) or "-"))
            versions = row["versions"]
            lines.append("  versions: " + " ".join(f"{k}={v}" for k, v in versions.items()))
    return "\n".join(lines)


def _default_name() -> str:
    from specfleet.workers.hardware import default_host_name

    return check_name(default_host_name()) or ""


def _token_hint() -> str:
    from specfleet.cluster.fleet import token_path

    return str(token_path())
