"""A heatmap's column heads (prompt names) stay inside their own column."""

from __future__ import annotations

from types import SimpleNamespace

from specfleet.serve.app import _templates
from specfleet.serve.svg import COLUMN_CHARS, heatmap

CHAR_PX = 7.6  # 12.5 px monospace, as the row label test counts it


def _drawn(prompts):
    view = SimpleNamespace(cells=[], models=("m1",), arms=("plain",), prompts=prompts,
                           cell=lambda target, model, prompt, arm: SimpleNamespace(rates=[]))
    return heatmap(view, "vm/torch/cpu", href=lambda cell: "")


def test_a_long_prompt_name_heads_its_column_without_running_over_the_next():
    # "p|q ✓ naïve longlong..." (36 characters) was drawn centred on a 190 px column, over
    # the row labels on its left and its neighbour on its right, and cut by the SVG's edge.
    long_name, longer = "p|q ✓ naïve " + "long" * 6, "x" * 300
    drawn = _drawn(("short", long_name, longer))
    for _, shown, prompt in drawn.columns:
        assert CHAR_PX * len(shown) <= drawn.cell_w - 8, shown
        assert shown == prompt or (shown.endswith("…") and prompt.startswith(shown[:-1]))
    assert [shown for _, shown, _ in drawn.columns][:2] == ["short", long_name]
    assert len(drawn.columns[2][1]) == COLUMN_CHARS
    svg = str(_templates().get_template("heatmap.html").module.heatmap(drawn))
    assert f"<title>{longer}</title>" in svg  # the whole name on hover
