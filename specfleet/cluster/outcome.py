"""How a matrix call ended: the matrix finished in the store (run to its end, or stopped by
Ctrl-C or SIGTERM), and what this call settled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specfleet.cluster.hoststate import HostTally
from specfleet.cluster.storewriter import StoreWriter
from specfleet.settings import LEASE_S


@dataclass(frozen=True)
class MatrixOutcome:
    """The result of `run_matrix`.

    Attributes:
        matrix_id: the matrix.
        status: "done" when every run of the matrix is done; "interrupted" when some run is
            interrupted or still pending; "failed" when only failed runs are left.
        done, failed, interrupted: runs settled this call, by status.
        pending: runs left unsent (their host was lost or has no worker).
        wall_s: wall time of the call.
        hosts: per-host tallies.
        skipped: runs left to a live driver that holds them (a second resume).
        owner: that driver, when it holds the whole matrix (this call took nothing).
    """

    matrix_id: str
    status: str
    done: int
    failed: int
    interrupted: int
    pending: int
    wall_s: float
    hosts: dict[str, HostTally]
    skipped: int = 0
    owner: str | None = None



def finish_matrix(writer: StoreWriter, matrix_id: str, tallies: dict[str, HostTally],
                  wall_s: float, driver_id: str) -> MatrixOutcome:
    """Finish the matrix in the store (`settle`, each store call waiting out an outage);
    the call's outcome from the hosts' tallies."""
    status = settle(writer.store, matrix_id, driver_id, call=writer.retry)
    return MatrixOutcome(
        matrix_id=matrix_id,
        status=status,
        done=sum(t.done for t in tallies.values()),
        failed=sum(t.failed for t in tallies.values()),
        interrupted=sum(t.interrupted for t in tallies.values()),
        pending=sum(t.pending for t in tallies.values()),
        wall_s=wall_s,
        hosts=tallies,
    )


def finish_stopped(store, matrix_id: str, driver_id: str) -> str | None:
    """Finish a matrix that Ctrl-C or SIGTERM stopped (`settle`, once, no retries).

    Returns:
        The matrix's status now, or None when none was stored: a store fault, or a second
        Ctrl-C while the write waited (the user insists; the lease ends it).
    """
    try:
        return settle(store, matrix_id, driver_id, stopped=True)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - best effort, said in the raise
        return None


def settle(store, matrix_id: str, driver_id: str, stopped: bool = False,
           call: Callable[..., Any] = lambda _what, method, *args: method(*args)) -> str:
    """Finish the matrix as its runs stand: done when every run is, failed when only failed
    runs are left (a call that ran to its end; a stopped one says interrupted), else
    interrupted; unless another driver took it over after our lease ran out, whose status
    stands. `call(what, method, *args)` makes each store call (`StoreWriter.retry`).

    Returns:
        The matrix's status now.
    """
    counts = call("read the matrix's counts", store.get_matrix, matrix_id).counts
    left = {status for status, n in counts.items() if status != "done" and n}
    status = ("done" if not left else
              "failed" if left == {"failed"} and not stopped else "interrupted")
    if not call("finish the matrix", store.finish_matrix, matrix_id, status, driver_id):
        # taken over after our lease ran out
        status = call("read the matrix", store.get_matrix, matrix_id).status
    return status


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a matrix; its message says how it was left and how to
    resume it.

    Args:
        status: what the matrix was finished as: "interrupted", "done" (the signal came
            after its last result), "running" (another driver took it over), or None (not
            finished: a store fault or a second Ctrl-C; it reads interrupted once this
            driver's lease of `lease_s` runs out).
    """

    def __init__(self, matrix_id: str, status: str | None = "interrupted",
                 lease_s: float = LEASE_S.default_s) -> None:
        resume = f"resume with: specfleet matrix resume {matrix_id}"
        said = {"done": f"matrix {matrix_id} interrupted after its last run; every run is "
                        "stored done",
                "interrupted": f"matrix {matrix_id} interrupted; runs in flight are marked "
                               f"interrupted; {resume}",
                "running": f"matrix {matrix_id} interrupted; another driver runs it now"}
        super().__init__(said.get(status or "", (
            f"matrix {matrix_id} interrupted before it could be marked so; it reads "
            f"interrupted within {lease_s:g} s, once its driver's lease runs out; then "
            f"{resume}")))
        self.matrix_id = matrix_id
        self.status = status
