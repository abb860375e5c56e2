"""Machine locks: one timed run at a time per physical machine, across every driver.

The worker actor already runs one `run` at a time, but that alone is not enough: two matrices
submitted from two drivers would both mark their runs `running` while one waits in the
actor's queue (its timing would include the wait), and a driver could not tell "busy with
another matrix" from "stuck". So each scheduler takes a lease on the machine from one named,
detached lock actor before it dispatches a run and gives it back when the result is stored.

Why an actor and not a Ray placement group or custom resource: an actor method call does not
hold resources, and a lease must not outlive its driver: a killed driver's lease is reclaimed as
soon as Ray marks its job dead (or at the latest when the lease expires). A scheduler keeps
its lease from run to run while nobody else waits, so a run costs one lock call. Each owner
says who it is in words (`matrix bench-77aa01, pid 4242 on ws-3`), and a refusal names whose
turn it is, so a driver that waits can tell its user which other driver it waits for.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from dataclasses import dataclass
from typing import NamedTuple

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from specfleet.workers.actor import NAMESPACE

LOCK_ACTOR_NAME = "specfleet-machine-locks"
# The head node carries this resource; the lock lives with the cluster, not with a host.
_HEAD_RESOURCE = "node:__internal_head__"
LEASE_CHECK_S = 0.25  # how often a held lease is re-confirmed while runs follow each other
WAIT_TTL_S = 2.0  # a refused owner asks again every poll (<= 0.25 s); silent this long = gone


class _Lease(NamedTuple):
    owner: str
    job_id: str | None
    expires_at: float
    holder: str  # the owner in words


@dataclass(frozen=True)
class Turn:
    """`MachineLocks.acquire`'s answer; true when granted, so `if lock.acquire(...)` reads as
    a yes or no.

    Attributes:
        granted: the caller holds the machine for its lease.
        holder: refused: whose turn it is, in words (the owner holding the machine, or the
            waiter that goes first); "" when granted or not said.
    """

    granted: bool
    holder: str = ""

    def __bool__(self) -> bool:
        return self.granted


class MachineLocks:
    """Leases keyed by machine: `{machine: _Lease}`, fair between owners.

    An owner refused a machine is remembered as waiting (for `WAIT_TTL_S`); the holder's
    next `acquire` then yields the machine, and a free machine goes to the first waiter, so
    two matrices on one machine take turns run by run instead of one starving the other.
    """

    def __init__(self) -> None:
        self._leases: dict[str, _Lease] = {}
        # machine -> owner -> (last asked, the owner in words)
        self._waiting: dict[str, dict[str, tuple[float, str]]] = {}

    def acquire(self, machine: str, owner: str, job_id: str | None, lease_s: float,
                holder: str = "") -> Turn:
        """Take or renew the lease on `machine` for `owner`.

        Args:
            holder: `owner` in words (`matrix bench-77aa01, pid 4242 on ws-3`): what a refused
                owner is told while `owner` holds the machine or goes first.

        Returns:
            A granted `Turn` when `owner` holds the machine for the next `lease_s` seconds; a
            refused one, naming whose turn it is, while another owner holds it, or when
            `owner` held it and yields to a waiting owner.
        """
        now = time.monotonic()
        queue = self._live_waiters(machine, now)
        others = [o for o in queue if o != owner]
        held = self._leases.get(machine)
        if held is not None and held.owner == owner and others:
            del self._leases[machine]  # our turn is over: the waiter gets the machine next
            return self._refuse(machine, owner, holder, now, self._waiter(machine, others[0]))
        if held is not None and held.owner != owner and not self._expired(held, now):
            return self._refuse(machine, owner, holder, now, held.holder)
        if (held is None or held.owner != owner) and queue and queue[0] != owner:
            # the first waiter goes first
            return self._refuse(machine, owner, holder, now, self._waiter(machine, queue[0]))
        self._waiting.get(machine, {}).pop(owner, None)
        self._leases[machine] = _Lease(owner, job_id, now + lease_s, holder)
        return Turn(True)

    def renew(self, machine: str, owner: str, lease_s: float) -> bool:
        """Extend `owner`'s lease during a run (never yields: a run is not cut in two)."""
        held = self._leases.get(machine)
        if held is None or held.owner != owner:
            return False
        self._leases[machine] = held._replace(expires_at=time.monotonic() + lease_s)
        return True

    def release(self, machine: str, owner: str) -> bool:
        """Give the machine back (if `owner` holds it) and stop waiting for it."""
        self._waiting.get(machine, {}).pop(owner, None)
        held = self._leases.get(machine)
        if held is None or held.owner != owner:
            return False
        del self._leases[machine]
        return True

    def holders(self) -> dict[str, str]:
        now = time.monotonic()
        return {m: lease.owner for m, lease in self._leases.items()
                if not self._expired(lease, now)}

    def _refuse(self, machine: str, owner: str, holder: str, now: float, turn: str) -> Turn:
        """Remember `owner` as waiting (a new waiter queues last) and say whose turn it is."""
        self._waiting.setdefault(machine, {})[owner] = (now, holder)
        return Turn(False, turn)

    def _waiter(self, machine: str, owner: str) -> str:
        return self._waiting[machine][owner][1]

    def _live_waiters(self, machine: str, now: float) -> list[str]:
        waiting = self._waiting.get(machine, {})
        for owner in [o for o, (seen, _) in waiting.items() if now - seen > WAIT_TTL_S]:
            del waiting[owner]  # stopped asking: gone, or finished elsewhere
        return list(waiting)  # insertion order: the first to ask goes first

    def _expired(self, lease: _Lease, now: float) -> bool:
        return now > lease.expires_at or _job_is_dead(lease.job_id)


def _job_is_dead(job_id: str | None) -> bool:
    if job_id is None:
        return False
    try:
        # Private but stable GCS read: lets a killed driver's lease go at once, not at expiry.
        from ray._private import state

        return any(j["JobID"] == job_id and j["IsDead"] for j in state.jobs())
    except Exception:  # noqa: BLE001 - fall back to lease expiry
        return False


def lock_actor():
    """The cluster's lock actor, created on the head node on first use.

    Returns:
        An ActorHandle of `MachineLocks` (named, detached, namespace `specfleet`).
    """
    remote = ray.remote(MachineLocks).options(
        name=LOCK_ACTOR_NAME,
        namespace=NAMESPACE,
        lifetime="detached",  # shared by every driver; outlives any one matrix
        get_if_exists=True,  # two drivers starting at once get the same actor
        num_cpus=0,
        resources={_HEAD_RESOURCE: 0.001},  # pin to the head: a removed host must not take it
        max_restarts=-1,  # a restart forgets leases; the worker's 1-wide group still serializes
        max_concurrency=1,
    )
    return remote.remote()


def new_owner(matrix_id: str) -> str:
    """A lease owner id unique to this scheduler call."""
    return f"{matrix_id}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def current_job_id() -> str | None:
    try:
        return ray.get_runtime_context().get_job_id()
    except Exception:  # noqa: BLE001 - not connected: no liveness check, lease expiry only
        return None


class Leases:
    """One scheduler's side of the machine locks: the leases it holds, cheaply kept.

    A lease confirmed within `LEASE_CHECK_S` is kept without asking again, so a stream of
    short runs costs no lock call each, and a waiting owner gets its turn that much later.
    Releases are not waited for (Ray runs one caller's actor calls in order), except at
    the end.

    Args:
        label: names the owner (a matrix or job id) in the lock's bookkeeping.
        lease_s: lease length; renewed while a run is in flight.
        timeout_s: longest wait for the lock actor's answer.
        holder: who takes the leases, in words (`matrix bench-77aa01`; default `label`);
            another driver refused a machine is told it with this driver's pid and host.

    Attributes:
        refused: machine -> why its last `acquire` was refused, in words
            (`leased to matrix bench-77aa01, pid 4242 on ws-3 (another driver)`).
    """

    def __init__(self, label: str, lease_s: float, timeout_s: float,
                 holder: str | None = None) -> None:
        self.lock = lock_actor()
        self.owner = new_owner(label)
        self.holder = f"{holder or label}, pid {os.getpid()} on {socket.gethostname()}"
        self.job_id = current_job_id()
        self.lease_s = lease_s
        self.timeout_s = timeout_s
        self.held: dict[str, float] = {}  # machine -> when the lease was last confirmed
        self.refused: dict[str, str] = {}
        self._renewed_at = 0.0

    def acquire(self, machine: str) -> bool:
        """Take or keep `machine`'s lease; False: not our turn (another owner holds or waits),
        and `refused[machine]` says whose it is."""
        now = time.monotonic()
        if machine in self.held and now - self.held[machine] < LEASE_CHECK_S:
            return True
        ref = self.lock.acquire.remote(machine, self.owner, self.job_id, self.lease_s,
                                       holder=self.holder)
        try:
            turn = ray.get(ref, timeout=self.timeout_s)
            why = (f"leased to {turn.holder} (another driver)" if turn.holder
                   else "leased to another driver")
        except (RayActorError, GetTimeoutError):  # restarting: try again on the next pass
            turn, why = Turn(False), f"no answer from the lock actor in {self.timeout_s:g} s"
        if turn:
            self.held[machine] = now
            self.refused.pop(machine, None)
        else:
            self.held.pop(machine, None)
            self.refused[machine] = why
        return turn.granted

    def renew(self, busy: set[str]) -> None:
        """Extend the leases of machines with a run in flight (at most every lease_s / 4)."""
        now = time.monotonic()
        if now - self._renewed_at < self.lease_s / 4:
            return
        self._renewed_at = now
        for machine in busy:
            self.lock.renew.remote(machine, self.owner, self.lease_s)

    def release(self, machine: str, wait: bool = False) -> None:
        self.held.pop(machine, None)
        ref = self.lock.release.remote(machine, self.owner)
        if wait:
            with contextlib.suppress(RayActorError, GetTimeoutError):
                ray.get(ref, timeout=self.timeout_s)

    def release_all(self) -> None:
        for machine in list(self.held):
            self.release(machine, wait=True)
