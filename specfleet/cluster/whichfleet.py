"""Which fleet a command talks to, and the one line that says so.

Every command that talks to a fleet resolves it in this order: `--address`,
`$SPECFLEET_ADDRESS`, `$RAY_ADDRESS`, the fleet this machine joined (`fleet up` / `fleet join`
remember it until `fleet leave`), else the embedded fleet (a private Ray instance on
127.0.0.1). `--embedded` forces the embedded fleet whatever is set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from specfleet.errors import UserError

ADDRESS_ENV = "SPECFLEET_ADDRESS"
RAY_ADDRESS_ENV = "RAY_ADDRESS"
EMBEDDED = "embedded"
JOINED = "the fleet this machine joined"
_ADDRESS = re.compile(r"^[A-Za-z0-9_.:-]+:\d{1,5}$")


@dataclass(frozen=True)
class FleetChoice:
    """The fleet a command uses: a head address (None: embedded) and where it came from."""

    address: str | None
    source: str  # "--address", "$SPECFLEET_ADDRESS", "$RAY_ADDRESS", JOINED or EMBEDDED

    @property
    def embedded(self) -> bool:
        return self.address is None


def check_address(address: str | None, flag: str = "--address") -> str | None:
    """HOST:PORT with a port in 1..65535 (`flag` names where the value came from)."""
    if address is None:
        return None
    if not _ADDRESS.match(address) or not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise UserError(f"{flag} {address!r}: expected HOST:PORT, e.g. 192.168.1.10:6379")
    return address


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
        raise UserError("--embedded and --address: give one of them")
    if embedded:
        return FleetChoice(None, EMBEDDED)
    env = os.environ if env is None else env
    if address is not None:
        return FleetChoice(check_address(address), "--address")
    for name in (ADDRESS_ENV, RAY_ADDRESS_ENV):
        if env.get(name):
            return FleetChoice(check_address(env[name], f"${name}"), f"${name}")
    if joined is True:
        from specfleet.cluster.noderecord import joined_fleet

        joined = joined_fleet()
    if joined:
        return FleetChoice(str(joined), JOINED)
    return FleetChoice(None, EMBEDDED)


def announce(choice: FleetChoice, hosts: int) -> str:
    """The line every fleet command starts with, e.g. `fleet: 10.0.0.1:6379 (3 hosts)`."""
    if choice.embedded:
        return "fleet: embedded (this machine only)"
    return f"fleet: {choice.address} ({hosts} host{'' if hosts == 1 else 's'})"
