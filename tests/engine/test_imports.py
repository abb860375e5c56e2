"""The engine core loads none of the heavy frameworks (DESIGN: one seam, runners apart)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import specfleet.engine

HEAVY = ("mlx", "torch", "ray", "sqlalchemy", "transformers")


def core_modules() -> list[str]:
    names = ["specfleet.engine"]
    for info in pkgutil.iter_modules(specfleet.engine.__path__):
        if info.name != "runners":
            names.append(f"specfleet.engine.{info.name}")
    return names


def test_core_module_list_covers_the_engine():
    names = core_modules()
    for expected in ("lookup", "governor", "config", "loop", "sampling", "stats"):
        assert f"specfleet.engine.{expected}" in names


def test_importing_the_engine_core_loads_no_heavy_framework():
    code = (
        "import importlib, sys\n"
        f"for name in {core_modules()!r}:\n"
        "    importlib.import_module(name)\n"
        "import specfleet.engine.runners.toy\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
