"""The loopback rules of `fleet up` and `fleet join` (called from the CLI or from Python): a
head on loopback stays on loopback, and a join Ray cannot make as asked is refused before
anything starts."""

from __future__ import annotations

from specfleet.cluster.raybind import bind_loopback
from specfleet.cluster.reach import (
    connect_error,
    host_port,
    join_host_port,
    not_a_head,
    speaks_http2,
)
from specfleet.errors import UserError
from specfleet.settings import is_loopback

LOOPBACK = "127.0.0.1"  # the one loopback address Ray keeps a node on


def this_ip() -> str:
    """This machine's network address, as Ray picks it for a node."""
    from ray._private.services import get_node_ip_address

    return get_node_ip_address()


def keep_on_loopback(node_ip: str | None) -> None:
    """A head whose node address is loopback listens on loopback only (`bind_loopback`, which
    `ray start` and the supervisor inherit): Ray moved it to this machine's network address,
    listening on every interface.

    Raises:
        UserError: a loopback address other than the one Ray keeps (`::1`).
    """
    if node_ip is None or not is_loopback(node_ip):
        return
    if node_ip != LOOPBACK:  # Ray moves ::1 to 127.0.0.1, where the record would not say
        raise UserError(f"--node-ip {node_ip}: Ray keeps a node on loopback at {LOOPBACK} "
                        f"only; expected {LOOPBACK} for a fleet of this machine alone, or "
                        "this host's network address, e.g. 192.168.1.11")
    bind_loopback()


def refuse_loopback_join(head: str, node_ip: str | None) -> None:
    """Refuse a join Ray cannot make as asked, before the head is asked anything else.

    Raises:
        UserError: a joining node on loopback (the fleet's other hosts could not reach it, and
            Ray moved it to the network address its record did not name), or HEAD on a head
            that listens on loopback only (`fleet up --node-ip 127.0.0.1`: `ray start` dials
            a loopback HEAD at this machine's network address, and retried there for minutes),
            or a loopback HEAD where what answers is no Ray head (a web server: no head at all).
    """
    if node_ip is not None and is_loopback(node_ip):
        raise UserError(f"--node-ip {node_ip}: a joining node on loopback is one the "
                        "fleet's other hosts cannot reach; expected this host's network "
                        "address, e.g. 192.168.1.11 (a fleet of one machine: `fleet up "
                        f"--node-ip {LOOPBACK}` alone)")
    host, port = host_port(head)
    if not is_loopback(host) or connect_error(head, 3.0) is not None:
        return  # not loopback, or nothing there: said where the head is asked
    if speaks_http2(head) is False:  # no head there to listen on loopback only
        raise not_a_head(head, "HEAD")
    dialed = join_host_port(this_ip(), port)
    if connect_error(dialed, 3.0) is not None:
        raise UserError(f"HEAD {head}: that head listens on loopback only (`fleet up --node-ip "
                        f"127.0.0.1`) and takes no other node: `ray start` dials a loopback "
                        f"address at this machine's network address ({dialed}), where it does "
                        "not answer; expected a head started with --node-ip a network address")
