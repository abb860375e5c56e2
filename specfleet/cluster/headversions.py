"""The head's Python and Ray versions against this host's, before `fleet join` starts a node:
Ray refuses mismatched nodes with a much longer message, so `join` says what to install."""

from __future__ import annotations

import json
import platform

import ray
from ray.exceptions import AuthenticationError

from specfleet.cluster.reach import connect_error, head_client, token_refused
from specfleet.errors import UserError

_READ_TIMEOUT_S = 10


def local_versions() -> dict[str, str]:
    """This interpreter's Python (patch level) and Ray versions."""
    return {"python": platform.python_version(), "ray": ray.__version__}


def read_head_versions(address: str) -> dict[str, str]:
    """The head's Python and Ray versions, from the cluster metadata in its GCS.

    Raises:
        UserError: the head cannot be reached or read.
    """
    _check_reachable(address)
    try:
        raw = head_client(address).internal_kv_get(
            b"CLUSTER_METADATA", namespace=b"cluster", timeout=_READ_TIMEOUT_S
        )
        meta = json.loads(raw.decode())
    except AuthenticationError:  # the address is right: the token is what to fix
        raise token_refused(address, "HEAD") from None
    except Exception as err:  # any failure here means: cannot read the head
        raise UserError(f"cannot read versions from head {address}: {_line(err)}; expected "
                        "the HOST:PORT `specfleet fleet up` printed on the head") from None
    return {"python": meta["python_version"], "ray": meta["ray_version"]}


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    err = connect_error(address, timeout_s)
    if err is not None:
        waited = f" (no answer in {timeout_s:g} s)" if isinstance(err, TimeoutError) else ""
        raise UserError(f"cannot reach the head at {address}: {_line(err)}{waited}; expected "
                        "the HOST:PORT `specfleet fleet up` printed on the head, reachable from "
                        "here") from None


def check_versions(head: dict[str, str], local: dict[str, str]) -> None:
    """Raise one line naming what to install when Python or Ray differ from the head's."""
    fixes = []
    if head["python"] != local["python"]:
        fixes.append(f"Python {head['python']} (this host has {local['python']})")
    if head["ray"] != local["ray"]:
        fixes.append(f"ray[default]=={head['ray']} (this host has {local['ray']})")
    if fixes:
        raise UserError(
            "this host does not match the head: install "
            + " and ".join(fixes)
            + ", then run `specfleet fleet join` again"
        )


def _line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else type(err).__name__
