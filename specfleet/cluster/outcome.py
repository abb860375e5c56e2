"""How a matrix call ended: the matrix finished in the store, and what this call settled."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.cluster.hoststate import HostTally
from specfleet.cluster.storewriter import StoreWriter


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
    """Finish the matrix in the store: done when every run is, failed when only failed runs
    are left, else interrupted (unless another driver took it over after our lease ran out,
    whose status stands); the call's outcome from the hosts' tallies."""
    store = writer.store
    counts = writer.retry("read the matrix's counts", store.get_matrix, matrix_id).counts
    left = {status: n for status, n in counts.items() if status != "done" and n}
    if not left:
        status = "done"
    elif set(left) == {"failed"}:
        status = "failed"
    else:
        status = "interrupted"
    if not writer.retry("finish the matrix", store.finish_matrix, matrix_id, status, driver_id):
        # taken over after our lease ran out
        status = writer.retry("read the matrix", store.get_matrix, matrix_id).status
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

