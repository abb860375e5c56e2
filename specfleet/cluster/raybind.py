"""Where this process's Ray listens and dials: Ray's multi-node switch, which keeps a loopback
node address (and every listener on loopback) only while it is off."""

from __future__ import annotations

import os
import sys

from specfleet.settings import is_loopback

# Ray's multi-node switch: off, Ray keeps a loopback node address (and binds loopback only).
MULTINODE_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def bind_loopback() -> None:
    """Keep Ray on 127.0.0.1 (nothing listens on the network): the embedded fleet, and a head
    whose node address is loopback (`fleet up --node-ip 127.0.0.1`), whose `ray start` and
    supervisor inherit this process's environment. With its multi-node switch on, Ray
    replaces a loopback node or head address by this machine's network address: that node
    then listened on every interface, and a client dialed an address no loopback head
    listens on."""
    _set_multinode(False)


def bind_for(address: str) -> None:
    """Tell this process's Ray how to reach the head at `address` (HOST:PORT): as given for
    a loopback host (`bind_loopback`), else as a node of a multi-node cluster on macOS
    (where Ray's switch is off by default: a Mac driver advertised 127.0.0.1 to remote
    hosts)."""
    if is_loopback(address.rpartition(":")[0].removeprefix("[").removesuffix("]")):
        bind_loopback()
    elif sys.platform == "darwin":
        _set_multinode(True)


def _set_multinode(enabled: bool) -> None:
    os.environ[MULTINODE_SWITCH] = "1" if enabled else "0"
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = enabled  # read at import; Ray resolves the node IP from it
