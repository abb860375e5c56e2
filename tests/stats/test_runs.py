"""Row normalization: every accepted shape of a run becomes the same `Row`."""

from __future__ import annotations

from types import SimpleNamespace

from specfleet.jobs.run import Target
from specfleet.stats.runs import CellKey, Counters, group_by_cell, target_label, to_rows


def test_target_label_from_every_shape() -> None:
    target = Target(host="h", engine="mlx", device="metal")
    assert target_label({"target": target}) == "h/mlx/metal"
    assert target_label({"target": "x/torch/cpu"}) == "x/torch/cpu"
    assert target_label({"target": {"host": "h", "engine": "e", "device": "d"}}) == "h/e/d"
    assert target_label({"host": "h", "engine": "e", "device": "d"}) == "h/e/d"
    assert target_label(SimpleNamespace(host="h", engine="e", device="d")) == "h/e/d"


def test_counters_from_mapping_or_top_level_fields() -> None:
    nested, flat = to_rows([
        {"target": "t", "model": "m", "prompt": "p", "arm": "a",
         "counters": {"rounds": 4, "proposed": 8, "accepted": 2, "generated_tokens": 9}},
        {"target": "t", "model": "m", "prompt": "p", "arm": "b", "rounds": 4, "proposed": 8,
         "accepted": 2, "generated_tokens": 9},
    ])
    assert nested.counters == flat.counters == Counters(rounds=4, proposed=8, accepted=2,
                                                         generated_tokens=9)
    assert nested.counters.acceptance_rate == 0.25
    assert nested.counters.tokens_per_forward == 2.0
    assert Counters().tokens_per_forward == 0.0


def test_missing_repeat_is_order_of_appearance_and_cells_sort() -> None:
    raw = [{"target": "t", "model": "m", "prompt": p, "arm": "a", "tok_per_s": v}
           for p, v in [("z", 1.0), ("b", 2.0), ("z", 3.0)]]
    cells = group_by_cell(to_rows(raw))
    assert list(cells) == [CellKey("t", "m", "b", "a"), CellKey("t", "m", "z", "a")]
    assert [(r.repeat, r.tok_per_s) for r in cells[CellKey("t", "m", "z", "a")]] == [
        (0, 1.0), (1, 3.0)]
    assert all(r.status == "done" and r.token_ids is None for r in to_rows(raw))


def test_a_peer_runs_counters_stay_none_not_zero() -> None:
    (peer,) = to_rows([{"target": "t", "model": "m", "prompt": "p", "arm": "hf-lookup",
                        "rounds": None, "proposed": None, "accepted": None,
                        "generated_tokens": 9}])
    assert not peer.counters.counted and peer.counters.generated_tokens == 9
    assert peer.counters.accepted is None
    assert peer.counters.acceptance_rate is None and peer.counters.tokens_per_forward is None
