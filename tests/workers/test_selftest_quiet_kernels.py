"""A worker's start-up self-test keeps transformers' kernel notes off the terminal, as
`specfleet selftest` does: `parity` without a fleet printed nine of them per run."""

from __future__ import annotations

import logging

from specfleet.workers import selftest


def test_a_self_test_from_any_caller_quiets_the_kernel_notes(monkeypatch) -> None:
    notes = logging.getLogger("transformers.integrations.hub_kernels")
    monkeypatch.setattr(notes, "level", logging.NOTSET)
    monkeypatch.setattr(selftest, "_results", {})
    monkeypatch.setattr(selftest, "run_self_test", lambda *args: "ran")
    assert selftest.self_test_once("torch", "cpu", "graded") == "ran"
    assert notes.level == logging.ERROR
