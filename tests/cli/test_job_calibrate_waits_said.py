"""`job calibrate` on a machine another driver holds says what it waits for, as `matrix run`
does: it sat silent for as long as a matrix held the machine."""

from __future__ import annotations

import io

from specfleet.cli.job_calibrate import MachineTurns
from specfleet.cluster.progress import WaitingLines


class HeldThenFree:
    """A `Leases` whose machine another driver holds for its first `refusals` asks."""

    def __init__(self, refusals: int) -> None:
        self.left = refusals
        self.refused: dict[str, str] = {}

    def acquire(self, machine: str) -> bool:
        if self.left:
            self.left -= 1
            self.refused[machine] = "leased to matrix bench-77aa01, pid 4242 on ws-3 (another driver)"
            return False
        self.refused.pop(machine, None)
        return True


def test_a_calibration_waiting_for_the_machine_says_who_holds_it_once_then_takes_it():
    said = io.StringIO()
    clock = iter(float(t) for t in range(100))
    turns = MachineTurns(HeldThenFree(3), {"h1": "machine-1"},
                         WaitingLines(clock=lambda: next(clock), stream=said))
    assert [turns.take("h1") for _ in range(4)] == [False, False, False, True]
    # Said when the wait begins, not again within 10 s of the same cause.
    assert said.getvalue().splitlines() == [
        "h1: waiting for the machine: leased to matrix bench-77aa01, pid 4242 on ws-3 "
        "(another driver); waited 0 s"]
    assert turns.waits["h1"].since is None  # its next wait starts from zero
