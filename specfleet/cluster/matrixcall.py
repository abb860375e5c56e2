"""The terms of one scheduler call (`scheduler.run_matrix`, `resume`, `dispatch_runs`):
its options, its outcome, and the interrupt that ends it early."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.cluster.hoststate import HostTally
from specfleet.settings import STORE_RETRY_S


@dataclass(frozen=True)
class SchedulerOptions:
    """Timeouts and switches of one scheduler call (seconds)."""

    run_timeout_s: float = 3600.0  # one run longer than this is cancelled and `interrupted`
    call_timeout_s: float = 10.0  # ping, lock, quiet check and fetching a ready result
    poll_s: float = 0.25  # longest wait for a result before looking at locks and health
    ping_every_s: float = 1.0  # how often a host running ours, or away, is pinged
    # A worker that answers no ping this long while it runs ours: the host is unreachable and
    # the run interrupted. Pings go to the control group, so a slow run still answers them.
    unreachable_after_s: float = 8.0
    host_wait_s: float = 120.0  # how long queued runs wait for a host away (`--wait`)
    # A host back from unreachable, still with the same worker process, gets its next run
    # after as long again as it was away (at most this): Ray's own health checks may sit in
    # TCP retransmission back-off about that long after the link returns, and still declare
    # the node dead, which would lose a run sent there (seen: dead 16 s after a 40 s cut).
    settle_max_s: float = 60.0
    lease_s: float = 120.0  # machine lease; renewed while a run is in flight
    store_lease_s: float | None = None  # run ownership lease (None: SPECFLEET_LEASE_S or 60 s)
    # How long a store write retries an unreachable store (the CLI reads SPECFLEET_STORE_RETRY_S).
    store_retry_s: float = STORE_RETRY_S.default_s
    require_quiet: bool = False  # wait for a quiet, unthrottled host before each run
    quiet_wait_s: float = 120.0  # then run anyway, saying so (the result is flagged)
    progress: bool = True  # rich progress bars on stderr


@dataclass(frozen=True)
class MatrixOutcome:
    """The result of `run_matrix` / `resume`.

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



class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a matrix; its message says how to resume it."""

    def __init__(self, matrix_id: str) -> None:
        super().__init__(f"matrix {matrix_id} interrupted; runs in flight are marked "
                         f"interrupted; resume with: specfleet matrix resume {matrix_id}")
        self.matrix_id = matrix_id
