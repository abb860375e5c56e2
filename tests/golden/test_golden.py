"""`matrix show`, `report`, `compare`, `history` and `results --cells` stay byte-identical on
a fixed stored matrix pair (regenerate with `python -m tests.golden.build --write` only in a
commit that changes these outputs on purpose)."""

from __future__ import annotations

import pytest

from tests.golden.build import EXPECTED, build_store, outputs

NAMES = sorted(p.name for p in EXPECTED.iterdir())


@pytest.fixture(scope="module")
def produced(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("golden")
    return outputs(build_store(tmp / "golden.db"), tmp / "report")


def test_every_output_has_a_golden_file(produced):
    assert sorted(produced) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_output_is_byte_identical(produced, name):
    assert produced[name] == (EXPECTED / name).read_text(), f"{name} changed"
