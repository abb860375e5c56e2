"""Recorded samples of each source's output (fixtures/), written from the tools' documented
formats: pmset, vm_stat, nvidia-smi CSV, and a sysfs/procfs tree laid out like `/`."""

from __future__ import annotations

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()
