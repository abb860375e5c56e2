"""The small supervisor `fleet up` / `fleet join` leave running: a lost node comes back.

When this host's Ray node is gone (its raylet exited: killed, crashed, or declared dead by the
head after a network cut) and the head answers again, the supervisor starts the same node
again, with the same name, labels, engines and temp dir, from the node record. It checks every
`CHECK_EVERY_S`; it never touches another Ray instance. `fleet leave` stops it first.
Run it in the foreground with `specfleet fleet join ... --supervise` (systemd, launchd).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable

from specfleet.cluster import noderecord
from specfleet.cluster.reach import connect_error, host_port
from specfleet.errors import UserError

CHECK_EVERY_S = 2.0


def head_answers(address: str, timeout_s: float = 2.0) -> bool:
    return connect_error(address, timeout_s) is None


def rejoin(record: noderecord.NodeRecord) -> None:
    """Start this host's node again from its record (`up` for the head, else `join`)."""
    from specfleet.cluster.membership import NodeOptions, fleet_join, fleet_up

    args = dict(record.join_args)
    port = args.pop("port", None)
    options = NodeOptions(**args)
    if record.head:
        # What is left of a head whose raylet died (its GCS holds the port) refused the new
        # head, every 2 s for good; a join replaces its own leftovers itself.
        noderecord.stop_processes(noderecord.own_processes(record))
        fleet_up(record.host, port=port or host_port(record.address)[1],
                 options=options, supervise=False)
    else:
        fleet_join(record.address, record.host, options=options, supervise=False)


def restart_from_disk() -> None:
    """Replace this process (same pid: the record and systemd still name it) by a supervisor
    running the specfleet now installed."""
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "specfleet.cluster.supervisor"])


def supervise(
    say: Callable[[str], None] = print,
    max_checks: int | None = None,
    check_every_s: float = CHECK_EVERY_S,
    restart: Callable[[], None] = restart_from_disk,
) -> None:
    """Watch this host's node until `fleet leave` (the record disappears) or `max_checks`;
    `restart` runs when specfleet changed on disk under this process (an upgrade)."""
    checks = 0
    unreadable = ""
    while max_checks is None or checks < max_checks:
        checks += 1
        try:
            record = noderecord.load()
        except UserError as err:  # not "left": the node may run; said once, read again
            if str(err) != unreadable:
                say(f"supervisor: {err}")
            unreadable = str(err)
            time.sleep(check_every_s)
            continue
        unreadable = ""
        if record is None:
            say("supervisor: this host left the fleet; stopping")
            return
        if head_answers(record.address) and not noderecord.node_alive(record):
            say(f"supervisor: node of {record.host} is gone and {record.address} answers; "
                "starting it again")
            started = time.monotonic()
            try:
                rejoin(record)
                say(f"supervisor: {record.host} is back ({time.monotonic() - started:.1f} s)")
            except ImportError as err:  # an upgrade: old modules here, new ones on disk
                say(f"supervisor: specfleet changed on disk since this supervisor started "
                    f"({str(err).splitlines()[0][:200]}); restarting it from the new code")
                restart()
            except Exception as err:  # noqa: BLE001 - keep watching; say why and try again
                say(f"supervisor: rejoin failed: {str(err).splitlines()[0][:200]}")
        time.sleep(check_every_s)


def supervise_here() -> None:
    """Record this process as the host's supervisor, then watch the node (foreground)."""
    from specfleet.cluster.membership import keep_supervisor

    keep_supervisor(os.getpid())
    supervise(lambda line: print(line, flush=True))


if __name__ == "__main__":
    supervise(lambda line: print(line, flush=True))
