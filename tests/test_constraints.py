"""`constraints.txt` (the versions `make venv` installs) stays inside pyproject's ranges."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, str]:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    pairs = [line.split("==") for line in lines if line.strip() and not line.startswith("#")]
    return {canonicalize_name(name): version for name, version in pairs}


def _requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    texts = [*project["dependencies"], *(r for extra in project["optional-dependencies"].values()
                                         for r in extra)]
    return [Requirement(text) for text in texts]


def test_every_pin_is_a_requirement_and_inside_its_range():
    pins = _pins()
    assert {"transformers", "mlx-lm", "ray"} <= set(pins)
    for name, version in pins.items():
        ranges = [r.specifier for r in _requirements() if canonicalize_name(r.name) == name]
        assert ranges, f"{name} is pinned but no requirement of specfleet's"
        for specifier in ranges:
            assert specifier.contains(version, prereleases=True), (name, version, str(specifier))
